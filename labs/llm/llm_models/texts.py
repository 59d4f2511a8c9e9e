"""Long real texts the labs measure a trained model's predictions on, each kept in the repository with its digest.

A quality figure (perplexity, KL divergence against a reference, top-1 agreement) is only as good as the text
it is averaged over: a few hundred tokens written for the site can flatter a method or hide its damage. The
texts here were written by others (``texts/README.md`` says where each comes from and under which licence),
are long enough for windows and evictions to matter (thousands of tokens), and are checked against their
SHA-256 when read, so a record that names a digest names exactly the text it measured.

Torch-free: reading a text needs no model; tokenizing it is the caller's (``llm_models.llama.ChatModel.encode``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "texts"


@dataclass(frozen=True)
class Text:
    name: str  # the file's name in texts/
    sha256: str
    source: str  # where it comes from, for a page's method section
    url: str

    @property
    def path(self) -> Path:
        return FOLDER / self.name

    def read(self) -> str:
        """The text, after checking its bytes against the digest: one ValueError naming the file otherwise."""
        try:
            data = self.path.read_bytes()
        except OSError as error:
            raise ValueError(f"{self.path}: cannot read the evaluation text ({error.strerror})") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != self.sha256:
            raise ValueError(f"{self.path}: sha256 is {digest}, not the {self.sha256} the labs were measured on "
                             f"(restore it: git checkout -- {self.path.name})")
        return data.decode("utf-8")


PYTHON_REFERENCE = Text(
    name="python-language-reference.txt",
    sha256="727374179ef7f9dbb0c987e1116f5a34a4b6f1e2d818fe4e7bf1a98c40e71cb5",
    source="The Python Language Reference, chapters 3.1-3.2 and 4 (data model, execution model), as CPython 3.11.7 "
           "ships them in pydoc_data",
    url="https://docs.python.org/3.11/reference/datamodel.html",
)
