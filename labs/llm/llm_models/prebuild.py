"""Every C loop of the shared package built once into the cache folder (llm_models.native), when the venv is made.

``make venv`` runs ``python -m llm_models.prebuild``: otherwise the suites of a cold ``make site`` each built the
same loops as they started side by side (about two seconds of a core per library, each suite paying for every one
it loads). A loop that cannot be built here is named and skipped: whatever needs it says so when it runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from llm_models import native, paged
from llm_models.kernels import int8_loop
from llm_models.llama import native_step
from llm_models.native import Build

# Each library as its users build it: the one-call step (its vector and plain paths), its attention alone, the int8
# rows loop, the paged attention loop.
LIBRARIES: dict[str, Callable[[], Build]] = {
    "step": native_step.build,
    "step, plain": lambda: native_step.build(plain=True),
    "attend_rows": native_step.build_attention,
    "int8_rows": int8_loop.build,
    "attend_blocks": paged.loops,
}


def main() -> int:
    if native.cache_folder() is None:
        print(f"llm_models.prebuild: {native.CACHE_ENV}=off: each process builds its loops")
        return 0
    for name, build in LIBRARIES.items():
        built = build()
        said = f"{built.seconds:.1f} s" if built.library is not None else f"not built: {built.reason}"
        print(f"llm_models.prebuild: {name}: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
