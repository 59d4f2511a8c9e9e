"""The prefix-caching lab's workloads: prompts from the checked reference text that share exactly the prefixes each
workload claims, through SmolLM2's real tokenizer and chat template (read once for the module, without weights)."""

from __future__ import annotations

import dataclasses
import unittest
from typing import ClassVar
from unittest import mock

from kv_prefix import workloads
from kv_prefix.workloads import Workload, build, common_prefix, digest
from llm_models.llama.generate import chat_prompt, content_ids, markup_ids
from llm_models.texts import PYTHON_REFERENCE


class PrefixWorkloadsTest(unittest.TestCase):
    tokenizer: ClassVar[object]
    built: ClassVar[dict[str, Workload]]

    @classmethod
    def setUpClass(cls) -> None:
        cls.tokenizer = workloads.tokenizer()
        cls.built = {name: build(cls.tokenizer, name) for name in workloads.WORKLOADS}

    # ---- helpers -------------------------------------------------------------------------------------------------
    def markup(self, text: str) -> list[int]:
        return markup_ids(self.tokenizer, text)

    def text(self, text: str) -> list[int]:
        return content_ids(self.tokenizer, text)

    def template(self, messages: list[dict[str, str]]) -> list[int]:
        """The template's own tokenization (apply_chat_template), for content that spells no special token."""
        rendered = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                      return_dict=True)
        return [int(i) for i in rendered["input_ids"]]

    def turns(self, ids: tuple[int, ...]) -> list[tuple[int, ...]]:
        """``ids`` cut before each <|im_start|>: one piece per message, the assistant header last."""
        start = self.markup("<|im_start|>")[0]
        cuts = [i for i, token in enumerate(ids) if token == start] + [len(ids)]
        return [tuple(ids[a:b]) for a, b in zip(cuts, cuts[1:])]

    # ---- shared_system -------------------------------------------------------------------------------------------
    def test_the_system_prompt_is_at_least_512_tokens(self) -> None:
        system = self.turns(self.built["shared_system"].sessions[0].prompt)[0]
        wrapping = len(self.markup("<|im_start|>system\n")) + len(self.markup("<|im_end|>\n"))
        self.assertGreaterEqual(len(system) - wrapping, 512)

    def test_every_shared_system_request_starts_with_the_same_system_ids(self) -> None:
        sessions = self.built["shared_system"].sessions
        self.assertEqual(len(sessions), 12)
        system = self.turns(sessions[0].prompt)[0]
        for session in sessions:
            self.assertEqual(session.prompt[:len(system)], system)
            self.assertEqual(len(self.turns(session.prompt)), 3)  # system, user, assistant header
        self.assertEqual(len({s.prompt for s in sessions}), len(sessions))  # and then a question of its own
        self.assertGreater(self.built["shared_system"].shared_head, len(system))  # the question's lead-in too

    def test_each_question_is_a_later_paragraph_of_at_most_60_tokens(self) -> None:
        wrapping = len(self.markup("<|im_start|>user\n")) + len(self.markup("<|im_end|>\n"))
        notes = [s.note for s in self.built["shared_system"].sessions]
        for session in self.built["shared_system"].sessions:
            self.assertLessEqual(len(self.turns(session.prompt)[1]) - wrapping, 60)
            self.assertGreaterEqual(session.note["paragraph"], session.note["system_paragraphs"])
        self.assertEqual(len({note["paragraph"] for note in notes}), len(notes))

    # ---- multi_turn ----------------------------------------------------------------------------------------------
    def messages(self, session: workloads.Session) -> list[dict[str, str]]:
        """The chat a multi_turn session's first prompt holds, rebuilt from the text."""
        text = workloads.paragraphs()
        first = text[session.note["paragraphs"][0]]
        return [{"role": "system", "content": workloads.TUTOR.format(section=first.section)},
                {"role": "user", "content": workloads.EXPLAIN + first.prose}]

    def test_the_first_chat_turn_is_the_chat_template(self) -> None:
        sessions = self.built["multi_turn"].sessions
        self.assertEqual([s.turns for s in sessions], [3, 3, 3, 3])
        for session in sessions:
            messages = self.messages(session)
            self.assertEqual(list(session.prompt), self.template(messages))
            self.assertEqual(list(session.prompt), chat_prompt(self.tokenizer, messages))  # ChatModel.chat_ids
            header = self.markup("<|im_start|>assistant\n")
            self.assertEqual(list(session.prompt[-len(header):]), header)

    def test_a_chat_turn_starts_with_the_previous_prompt_and_reply(self) -> None:
        workload = self.built["multi_turn"]
        im_end = self.markup("<|im_end|>")
        self.assertEqual(workload.end_of_turn, tuple(self.markup("<|im_end|>\n")))
        # A reply as a model may generate it: tokens that re-tokenizing its text would merge into others.
        reply = [self.text("Ob")[0], *self.text("jects are data")]
        self.assertNotEqual(self.text(self.tokenizer.decode(reply)), reply)
        for ended in (reply + im_end, reply):  # stopped by <|im_end|>, or cut by max_tokens
            with self.subTest(stopped=ended[-1:] == im_end):
                previous = list(workload.sessions[0].prompt)
                for turn in (1, 2):
                    prompt = workload.next_prompt(previous, ended, 0, turn)
                    self.assertEqual(prompt[:len(previous) + len(ended)], previous + ended)
                    rest = prompt[len(previous) + len(ended):]
                    close = self.markup("\n") if ended[-1:] == im_end else self.markup("<|im_end|>\n")
                    self.assertEqual(rest, close + list(workload.sessions[0].follow_ups[turn - 1]))
                    previous = prompt

    def test_a_later_turn_is_the_templates_rendering_of_the_whole_chat(self) -> None:
        text = workloads.paragraphs()
        replies = ["Objects are how Python holds data.", "Each object has an identity, a type and a value."]
        for index, session in enumerate(self.built["multi_turn"].sessions):
            messages, prompt = self.messages(session), list(session.prompt)
            for turn, paragraph in enumerate(session.note["paragraphs"][1:], 1):
                reply = replies[turn - 1]
                messages += [{"role": "assistant", "content": reply},
                             {"role": "user", "content": workloads.FOLLOW_UP + text[paragraph].prose}]
                prompt = self.built["multi_turn"].next_prompt(prompt, self.text(reply) + self.markup("<|im_end|>"),
                                                              index, turn)
                self.assertEqual(prompt, self.template(messages))

    def test_a_turn_outside_the_session_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "turns 1 to 2 after its first prompt, not 3"):
            self.built["multi_turn"].next_prompt([1], [2], 0, 3)

    # ---- few_shot ------------------------------------------------------------------------------------------------
    def head(self) -> list[int]:
        return (self.markup("<|im_start|>system\n") + self.text(workloads.FEW_SHOT_INSTRUCTION)
                + self.markup("<|im_end|>\n<|im_start|>user\n"))

    def test_the_few_shot_head_is_30_to_60_tokens_and_shared_by_all(self) -> None:
        workload = self.built["few_shot"]
        self.assertTrue(30 <= len(self.head()) <= 60, len(self.head()))
        self.assertEqual(workload.shared_head, len(self.head()))
        for session in workload.sessions:
            self.assertEqual(list(session.prompt[:len(self.head())]), self.head())

    def test_half_the_few_shot_requests_use_the_canonical_order(self) -> None:
        notes = [s.note for s in self.built["few_shot"].sessions]
        canonical = [n for n in notes if n["canonical"]]
        self.assertEqual(len(canonical), len(notes) // 2)
        self.assertTrue(all(n["order"] == list(range(6)) for n in canonical))
        self.assertTrue(all(n["order"] != list(range(6)) and sorted(n["order"]) == list(range(6))
                            for n in notes if not n["canonical"]))

    def test_every_few_shot_prompt_holds_the_same_examples_in_its_recorded_order(self) -> None:
        sessions = self.built["few_shot"].sessions
        canonical = self.turns(next(s for s in sessions if s.note["canonical"]).prompt)[1:-2]  # user, assistant...
        examples = [canonical[i:i + 2] for i in range(0, len(canonical), 2)]
        self.assertEqual(len(examples), 6)
        for session in sessions:
            sent = self.turns(session.prompt)[1:-2]
            self.assertEqual(sent, [turn for e in session.note["order"] for turn in examples[e]])

    def test_canonical_few_shot_prompts_share_the_whole_example_block(self) -> None:
        prompts = [s.prompt for s in self.built["few_shot"].sessions if s.note["canonical"]]
        block = sum(len(t) for t in self.turns(prompts[0])[:-2])  # the head and every example, up to the question
        self.assertGreater(block, 4 * len(self.head()))
        self.assertGreaterEqual(common_prefix(*prompts), block)

    def test_shuffled_few_shot_prompts_share_only_the_head(self) -> None:
        sessions = self.built["few_shot"].sessions
        for shuffled in (s for s in sessions if not s.note["canonical"]):
            for other in sessions:
                if other is not shuffled:
                    self.assertEqual(common_prefix(shuffled.prompt, other.prompt), len(self.head()))

    def test_too_many_shuffled_requests_are_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "at most 5"):
            build(self.tokenizer, "few_shot", requests=12)

    # ---- the workloads together ----------------------------------------------------------------------------------
    def test_workloads_are_deterministic(self) -> None:
        for name in workloads.WORKLOADS:
            with self.subTest(name):
                self.assertEqual(digest(build(self.tokenizer, name)), digest(self.built[name]))
                self.assertEqual(self.built[name].text_sha256, PYTHON_REFERENCE.sha256)
        self.assertNotEqual(digest(build(self.tokenizer, "few_shot", seed=1)), digest(self.built["few_shot"]))
        self.assertEqual(len({digest(w) for w in self.built.values()}), len(self.built))

    def test_the_text_digest_is_checked(self) -> None:
        wrong = dataclasses.replace(PYTHON_REFERENCE, sha256="0" * 64)
        for name in workloads.WORKLOADS:
            with self.subTest(name), mock.patch.object(workloads, "PYTHON_REFERENCE", wrong):
                with self.assertRaisesRegex(ValueError, "python-language-reference.txt: sha256 is"):
                    build(self.tokenizer, name)

    def test_an_unknown_workload_or_size_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "shared_system, multi_turn, few_shot"):
            build(self.tokenizer, "long_context")
        with self.assertRaisesRegex(TypeError, "unknown size chats"):
            build(self.tokenizer, "shared_system", chats=2)
        with self.assertRaisesRegex(ValueError, "requests=0"):
            build(self.tokenizer, "shared_system", requests=0)


if __name__ == "__main__":
    unittest.main()
