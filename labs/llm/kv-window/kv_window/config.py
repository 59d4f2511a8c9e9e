"""Which policy decides what the cache keeps, with which parameters: one frozen dataclass, checked once.

Torch-free: the figures module prices each policy's memory with these without importing torch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

POLICY_NAMES = ("full", "window", "sinks", "snapkv")
RULES = ("read", "rerotate")  # sinks: keys cached unrotated and rotated at read, or kept rotated and re-rotated
DTYPES = ("float32", "bfloat16")  # what the sinks cache stores keys and values in, and rotates them in


@dataclass(frozen=True)
class Policy:
    name: str = "full"  # one of POLICY_NAMES
    slots: int = 256  # window, sinks, snapkv: key/value slots kept per layer and key/value head between steps
    sinks: int = 4  # sinks: StreamingLLM's first positions, never evicted (its "attention sinks")
    rule: str = "read"  # sinks: how cached keys get their rotary positions (RULES)
    dtype: str = "float32"  # sinks: the cache's storage and rotation dtype (DTYPES); the others store the model's
    observation: int = 32  # snapkv: the last queries of each chunk, whose attention votes on what stays
    kernel: int = 5  # snapkv: votes are averaged over this many neighbouring slots before the top-k (odd)

    def __post_init__(self) -> None:
        if self.name not in POLICY_NAMES:
            raise ValueError(f"unknown cache policy {self.name!r}; known policies: {', '.join(POLICY_NAMES)}")
        if self.slots < 1:
            raise ValueError(f"a policy keeps at least 1 slot, got slots={self.slots}")
        if self.name == "sinks" and not 0 <= self.sinks < self.slots:
            raise ValueError(f"sinks must lie in [0, slots) = [0, {self.slots}), got {self.sinks}")
        if self.rule not in RULES:
            raise ValueError(f"sinks rule must be one of {RULES}, got {self.rule!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"sinks dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.name == "snapkv" and not 1 <= self.observation < self.slots:
            raise ValueError(f"snapkv's observation window must lie in [1, slots) = [1, {self.slots}), "
                             f"got {self.observation}")
        if self.kernel < 1 or self.kernel % 2 == 0:
            raise ValueError(f"snapkv's pooling kernel must be odd and positive, got {self.kernel}")

    @property
    def bounded(self) -> bool:
        """Whether the cache keeps a fixed number of slots (every policy but the full cache)."""
        return self.name != "full"

    @property
    def label(self) -> str:
        """A short name that tells policies apart: 'full', 'window-256', 'sinks-4-256-read-float32', 'snapkv-256'."""
        if self.name == "full":
            return "full"
        if self.name == "sinks":
            return f"sinks-{self.sinks}-{self.slots}-{self.rule}-{self.dtype}"
        return f"{self.name}-{self.slots}"

    def as_record(self) -> dict[str, object]:
        return {"label": self.label, **asdict(self)}
