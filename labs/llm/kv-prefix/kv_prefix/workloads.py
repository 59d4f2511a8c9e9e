"""Three workloads whose prompts share prefixes, built from real text: what the prefix cache is measured on.

A prefix cache only pays when requests repeat the same leading tokens, and how much it pays depends on how they
repeat them. Each workload here is one way real traffic does, built deterministically from the Python Language
Reference (``llm_models.texts.PYTHON_REFERENCE``: written by others, checked against its SHA-256 when read), split
into paragraphs on blank lines. Prompts are token ids under SmolLM2's tokenizer and ChatML template
(``<|im_start|>role\\n...<|im_end|>\\n``, rendered by ``llm_models.llama.generate.chat_prompt``, as
``ChatModel.chat_ids`` does); building one needs the tokenizer only, no weights (``tokenizer()``).

- ``shared_system``: one long system prompt (the text's first paragraphs, at least ``system_tokens`` = 550 tokens,
  after a two-sentence instruction) and, per request, a different short question (``Summarise this passage in one
  sentence:`` and a later paragraph, at most ``question_tokens`` = 60 tokens), 12 requests. The chatbot or RAG
  deployment with a fixed preamble: every request after the first should find the whole system prompt cached and
  prefill only its question.
- ``multi_turn``: 4 chats of 3 turns, each turn resending the whole history (a short system line naming the
  section, then a paragraph to explain; each later turn asks about the next paragraph). The chat front end: turn
  ``k``'s prompt starts with turn ``k - 1``'s prompt and the reply the model gave, so a cache that keeps the blocks
  a request filled while decoding hands the next turn its history. The first turn's prompt is built here; a later
  turn's depends on the reply actually generated, so it is built at run time by ``next_prompt`` from the previous
  prompt, the reply ids and the session's next follow-up: by concatenating token ids, never by re-tokenizing the
  history (a re-tokenized reply can come out as other ids, and the shared prefix would end there). Building the
  workload checks that this concatenation is the chat template's own rendering of the whole chat.
- ``few_shot``: 10 requests that share one instruction head (a system message, about 50 tokens with its markup)
  and 6 examples (a sentence of the text as a user turn, the title of its section as the assistant's answer), then
  ask for the section of their own sentence. Half use the examples in their canonical order, half in a seeded
  shuffle whose first example differs from every other request's (each example starts with its own token, so
  ``requests`` may be at most ``2 * examples - 1``): a prefix cache finds the whole example block for
  the canonical ones and only the head for the shuffled ones, though all ten hold the same examples. Prefix caching
  matches tokens, not content; each request's note records its order.

The result is a ``Workload``: its ``sessions`` (one client's requests, sent one after another: ``prompt`` is the
first request's ids, ``follow_ups`` the ids each later turn appends after the reply, already ChatML-wrapped and
ending with the assistant header; single-shot workloads have none), ``end_of_turn`` (the ids that close a reply,
``<|im_end|>`` and a newline), the text's digest and the sizes it was built with. ``digest(workload)`` is a SHA-256
over every id, so a record names exactly what ran. Ids are tuples: a workload cannot be changed after its digest
is taken (``list(session.prompt)`` is what ``Scheduler.submit`` takes).

API: ``build(tokenizer, name, **sizes)`` (``name`` in ``WORKLOADS``; or ``shared_system``, ``multi_turn``,
``few_shot`` directly), ``Workload.next_prompt(previous_prompt, reply, session, turn)`` and the plain
``next_prompt(previous_prompt, reply, follow_up, end_of_turn)``, ``Workload.shared_head`` (the tokens every first
prompt shares), ``common_prefix(*ids)``, ``digest(workload)``, ``tokenizer()`` and ``paragraphs()``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llm_models.texts import PYTHON_REFERENCE

if TYPE_CHECKING:  # a type only: transformers is imported by ``tokenizer()`` and by the caller's model
    from transformers import PreTrainedTokenizerBase

WORKLOADS = ("shared_system", "multi_turn", "few_shot")

SYSTEM_INSTRUCTION = ("You answer questions about the Python Language Reference. The excerpt below is the "
                      "reference text you answer from.")
QUESTION = "Summarise this passage in one sentence: "
TUTOR = "You are a patient tutor. The chat is about the section “{section}” of the Python Language Reference."
EXPLAIN = "Explain this passage in plain words:\n\n"
FOLLOW_UP = "Thanks. Now explain the passage that follows it:\n\n"
FEW_SHOT_INSTRUCTION = ("Each user message is one sentence from the Python Language Reference. Reply with the "
                        "title of the section the sentence comes from, exactly as the earlier replies spell "
                        "section titles, and nothing else.")


@dataclass(frozen=True)
class Session:
    """One client's requests, sent one after another: the first prompt, then one follow-up per later turn."""
    prompt: tuple[int, ...]  # the first request's prompt ids, ending with the assistant header
    follow_ups: tuple[tuple[int, ...], ...] = ()  # each later user turn, ChatML-wrapped, with the assistant header
    note: dict[str, Any] = field(default_factory=dict)  # what it was built from (paragraphs, few-shot order...)

    @property
    def turns(self) -> int:
        return 1 + len(self.follow_ups)


@dataclass(frozen=True)
class Workload:
    name: str  # one of WORKLOADS
    about: str  # what it is, in one sentence, for a record or a page
    sessions: tuple[Session, ...]
    end_of_turn: tuple[int, ...]  # closes a reply before the next user turn: <|im_end|> and a newline
    text_sha256: str  # the digest of the text its prompts come from
    sizes: dict[str, int]  # the sizes it was built with, defaults included

    @property
    def shared_head(self) -> int:
        """How many leading tokens every session's first prompt shares."""
        return common_prefix(*(session.prompt for session in self.sessions))

    def next_prompt(self, previous_prompt: Sequence[int], reply: Sequence[int], session: int, turn: int) -> list[int]:
        """Session ``session``'s turn ``turn`` (0 is its first prompt, so 1 is its first follow-up) after ``reply``
        to ``previous_prompt``, its turn ``turn - 1``: ``next_prompt`` with that turn's follow-up."""
        follow_ups = self.sessions[session].follow_ups
        if not 1 <= turn <= len(follow_ups):
            raise ValueError(f"session {session} has turns 1 to {len(follow_ups)} after its first prompt, not {turn}")
        return next_prompt(previous_prompt, reply, follow_ups[turn - 1], self.end_of_turn)


def common_prefix(*sequences: Sequence[int]) -> int:
    """The number of leading ids all ``sequences`` share."""
    if not sequences:
        return 0
    shortest = min(len(ids) for ids in sequences)
    for position in range(shortest):
        if len({ids[position] for ids in sequences}) > 1:
            return position
    return shortest


def next_prompt(previous_prompt: Sequence[int], reply: Sequence[int], follow_up: Sequence[int],
                end_of_turn: Sequence[int]) -> list[int]:
    """The next turn's prompt: ``previous_prompt``, the ``reply`` ids exactly as generated, what of ``end_of_turn``
    the reply did not already end with (a reply stopped by ``<|im_end|>`` holds it: only the newline is added),
    then ``follow_up`` (the next user message, wrapped, with the assistant header)."""
    reply, end_of_turn = list(reply), list(end_of_turn)
    done = next(k for k in range(min(len(end_of_turn), len(reply)), -1, -1)
                if reply[len(reply) - k:] == end_of_turn[:k])  # k = 0 always holds
    return [*previous_prompt, *reply, *end_of_turn[done:], *follow_up]


def digest(workload: Workload) -> str:
    """SHA-256 over the workload's name and every id it sends (prompts, follow-ups, end of turn)."""
    body = {"name": workload.name, "end_of_turn": list(workload.end_of_turn),
            "sessions": [[list(s.prompt), [list(f) for f in s.follow_ups]] for s in workload.sessions]}
    return hashlib.sha256(json.dumps(body, separators=(",", ":")).encode()).hexdigest()


@functools.cache
def tokenizer() -> PreTrainedTokenizerBase:
    """SmolLM2-135M-Instruct's tokenizer and chat template, read from the packaged GGUF file without its weights
    (about 5 s, once per process); the file's digest is checked as ``weights.trained()`` checks it. A caller that
    has the model already passes ``ChatModel.tokenizer`` instead: the same tokenizer."""
    from transformers import AutoTokenizer

    from llm_models.llama import weights

    gguf = weights.packaged_gguf()
    found = weights.file_sha256(gguf)
    if found != weights.GGUF_SHA256:
        raise weights.WeightsError(f"{gguf}: damaged, its SHA-256 is {found[:16]}..., not the pinned "
                                   f"{weights.GGUF_SHA256[:16]}... (reinstall it: rm -rf labs/.venv && make venv)")
    return AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)


def build(tokenizer: PreTrainedTokenizerBase, name: str, **sizes: int) -> Workload:
    """The workload ``name`` (one of ``WORKLOADS``) under ``tokenizer``, with ``sizes`` overriding its defaults."""
    builders = {"shared_system": shared_system, "multi_turn": multi_turn, "few_shot": few_shot}
    if name not in builders:
        raise ValueError(f"no workload {name!r}: the workloads are {', '.join(WORKLOADS)}")
    return builders[name](tokenizer, **sizes)


# ---- the text ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Paragraph:
    index: int  # its position among the text's blank-line separated paragraphs
    text: str  # as written, line breaks included
    section: str  # the title of the nearest heading above it

    @property
    def prose(self) -> str:
        """Its words on one line."""
        return " ".join(self.text.split())

    @property
    def is_prose(self) -> bool:
        """Running text: not a heading, a block with indented lines (definitions, code, notes), a list item or a
        table, and at least 12 words."""
        lines = self.text.split("\n")
        return (not _heading(self.text) and not any(line[:1].isspace() for line in lines)
                and not lines[0].startswith(("* ", "+", "-[", "[")) and len(self.text.split()) >= 12)


def _heading(text: str) -> str | None:
    lines = text.strip("\n").split("\n")
    if len(lines) == 2 and re.fullmatch(r"[*=\-]+", lines[1]) and len(lines[1]) == len(lines[0]):
        return lines[0]
    return None


def paragraphs() -> list[Paragraph]:
    """The reference text's paragraphs, split on blank lines, each with its section's title."""
    section, found = "", []
    for index, text in enumerate(re.split(r"\n\s*\n", PYTHON_REFERENCE.read().strip("\n"))):
        section = _heading(text) or section
        found.append(Paragraph(index, text, section))
    return found


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=[.!?])\s+(?=[A-Z“\"*])", text)


def _short_sentences(paragraph: Paragraph) -> list[str]:
    """Its sentences of 8 to 30 words that read alone: capitalised, ending with a full stop."""
    return [s for s in _sentences(paragraph.prose) if 8 <= len(s.split()) <= 30 and s[:1].isupper() and s[-1] == "."]


# ---- the chat template ---------------------------------------------------------------------------------------------
class _ChatML:
    """Token ids through the tokenizer's own chat template (``chat_prompt``), and the ChatML pieces a later turn
    appends, checked against that template when a workload is built (``check_follow_ups``)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        from llm_models.llama import generate  # imports torch: only building a workload needs it

        self.tokenizer, self._generate = tokenizer, generate
        self.end_of_turn = self.markup("<|im_end|>\n")

    def chat(self, messages: list[dict[str, str]]) -> tuple[int, ...]:
        return tuple(self._generate.chat_prompt(self.tokenizer, messages))

    def text(self, text: str) -> tuple[int, ...]:
        return tuple(self._generate.content_ids(self.tokenizer, text))

    def markup(self, text: str) -> tuple[int, ...]:
        return tuple(self._generate.markup_ids(self.tokenizer, text))

    def user_turn(self, content: str) -> tuple[int, ...]:
        """A user message as a later turn appends it: wrapped in ChatML, then the assistant's turn opened."""
        return (*self.markup("<|im_start|>user\n"), *self.text(content),
                *self.markup("<|im_end|>\n<|im_start|>assistant\n"))

    def check_follow_ups(self, messages: list[dict[str, str]], follow_ups: Sequence[str]) -> None:
        """ValueError unless a chat continued with ``next_prompt`` is the template's own rendering of it (with a
        placeholder reply, ended by the stop token or not)."""
        reply = "Noted."
        stop = self.end_of_turn[:1]  # <|im_end|>, the token generation stops on
        for ended in (False, True):
            prompt, history = list(self.chat(messages)), list(messages)
            for content in follow_ups:
                history += [{"role": "assistant", "content": reply}, {"role": "user", "content": content}]
                ids = self.text(reply) + (stop if ended else ())
                prompt = next_prompt(prompt, ids, self.user_turn(content), self.end_of_turn)
                if tuple(prompt) != self.chat(history):
                    raise ValueError("the tokenizer's chat template does not render a later turn as ChatML "
                                     "(<|im_start|>role\\n...<|im_end|>\\n): next_prompt would not continue its chats")


def _sizes(given: dict[str, int], defaults: dict[str, int]) -> dict[str, int]:
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise TypeError(f"unknown size {', '.join(unknown)}: this workload takes {', '.join(defaults)}")
    sizes = defaults | given
    small = [f"{key}={value}" for key, value in sizes.items() if key != "seed" and value < 1]
    if small:
        raise ValueError(f"sizes must be at least 1, got {', '.join(small)}")
    return sizes


def _spread(items: Sequence[Any], count: int, what: str) -> list[Any]:
    """``count`` of ``items``, evenly spaced from the first: the same ones on every run."""
    if len(items) < count:
        raise ValueError(f"the text holds {len(items)} {what}, fewer than the {count} asked for")
    return [items[i * len(items) // count] for i in range(count)]


# ---- the workloads -------------------------------------------------------------------------------------------------
def shared_system(tokenizer: PreTrainedTokenizerBase, **given: int) -> Workload:
    """One long system prompt, a different short question per request."""
    sizes = _sizes(given, {"requests": 12, "system_tokens": 550, "question_tokens": 60})
    chat, text = _ChatML(tokenizer), paragraphs()
    system, used = SYSTEM_INSTRUCTION, 0  # the instruction, then the text's first `used` paragraphs
    while len(chat.text(system)) < sizes["system_tokens"]:
        if used == len(text):
            raise ValueError(f"the whole text is shorter than system_tokens={sizes['system_tokens']}")
        system += "\n\n" + text[used].text
        used += 1
    questions = [p for p in text[used:]
                 if p.is_prose and len(chat.text(QUESTION + p.prose)) <= sizes["question_tokens"]]
    sessions = tuple(
        Session(chat.chat([{"role": "system", "content": system}, {"role": "user", "content": QUESTION + p.prose}]),
                note={"paragraph": p.index, "section": p.section, "system_paragraphs": used})
        for p in _spread(questions, sizes["requests"], f"paragraphs of at most {sizes['question_tokens']} tokens"))
    return Workload("shared_system", "one long shared system prompt, then a different short question per request",
                    sessions, chat.end_of_turn, PYTHON_REFERENCE.sha256, sizes)


def multi_turn(tokenizer: PreTrainedTokenizerBase, **given: int) -> Workload:
    """Chats that resend their whole history each turn: one paragraph to explain per turn."""
    sizes = _sizes(given, {"chats": 4, "turns": 3, "paragraph_tokens": 120})
    chat, text, turns = _ChatML(tokenizer), paragraphs(), sizes["turns"]

    def fits(p: Paragraph, section: str) -> bool:
        return p.is_prose and p.section == section and len(chat.text(p.prose)) <= sizes["paragraph_tokens"]

    runs, start = [], 0  # runs of `turns` consecutive paragraphs of one section, none overlapping
    while start + turns <= len(text):
        run = text[start:start + turns]
        if all(fits(p, run[0].section) for p in run):
            runs.append(run)
            start += turns
        else:
            start += 1
    sessions = []
    for run in _spread(runs, sizes["chats"], f"runs of {turns} short paragraphs"):
        messages = [{"role": "system", "content": TUTOR.format(section=run[0].section)},
                    {"role": "user", "content": EXPLAIN + run[0].prose}]
        follow_ups = [FOLLOW_UP + p.prose for p in run[1:]]
        chat.check_follow_ups(messages, follow_ups)
        sessions.append(Session(chat.chat(messages), tuple(chat.user_turn(f) for f in follow_ups),
                                note={"paragraphs": [p.index for p in run], "section": run[0].section}))
    return Workload("multi_turn", "chats whose every turn resends the whole history, the model's replies included",
                    tuple(sessions), chat.end_of_turn, PYTHON_REFERENCE.sha256, sizes)


def few_shot(tokenizer: PreTrainedTokenizerBase, **given: int) -> Workload:
    """One instruction head and the same examples, in the canonical order or a shuffled one, then a question."""
    sizes = _sizes(given, {"requests": 10, "examples": 6, "seed": 0})
    chat, count = _ChatML(tokenizer), sizes["examples"]
    shuffled = sizes["requests"] // 2
    if shuffled > count - 1:
        raise ValueError(f"{shuffled} shuffled requests need as many different first examples besides the "
                         f"canonical one: examples={count} allows at most {count - 1} (requests <= {2 * count - 1})")
    by_section: dict[str, list[tuple[int, str]]] = {}
    for paragraph in paragraphs():
        if paragraph.is_prose:
            by_section.setdefault(paragraph.section, []).extend(
                (paragraph.index, sentence) for sentence in _short_sentences(paragraph))
    per_section = 1 + -(-(sizes["requests"]) // count)  # an example and this many questions' sentences
    sections = _spread([s for s, found in by_section.items() if len(found) >= per_section], count,
                       f"sections with {per_section} short sentences")
    examples, questions, firsts = [], [], set()
    for section in sections:  # each example starts with its own token, so two orders part right after the head
        found = by_section[section]
        pick = next((i for i, (_, s) in enumerate(found) if chat.text(s)[0] not in firsts), None)
        if pick is None:
            raise ValueError(f"every short sentence of the section {section!r} starts with the same token as "
                             f"an earlier example")
        firsts.add(chat.text(found[pick][1])[0])
        examples.append((section, found[pick][1]))
        questions.append([(section, index, s) for i, (index, s) in enumerate(found) if i != pick])
    rng = random.Random(sizes["seed"])
    orders = []
    for first in rng.sample(range(1, count), shuffled):
        rest = [e for e in range(count) if e != first]
        rng.shuffle(rest)
        orders.append((first, *rest))
    head = [{"role": "system", "content": FEW_SHOT_INSTRUCTION}]
    sessions = []
    for request in range(sizes["requests"]):
        canonical = request % 2 == 0 or request // 2 >= shuffled
        order = tuple(range(count)) if canonical else orders[request // 2]
        section, index, sentence = questions[request % count][request // count]
        messages = list(head)
        for e in order:
            messages += [{"role": "user", "content": examples[e][1]}, {"role": "assistant", "content": examples[e][0]}]
        messages.append({"role": "user", "content": sentence})
        sessions.append(Session(chat.chat(messages), note={"order": list(order), "canonical": canonical,
                                                           "answer": section, "paragraph": index}))
    return Workload("few_shot", "the same instruction and few-shot examples, half in one order and half shuffled",
                    tuple(sessions), chat.end_of_turn, PYTHON_REFERENCE.sha256, sizes)
