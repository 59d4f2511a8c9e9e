"""The project's Llama decoder computes what transformers' LlamaForCausalLM computes, on the trained SmolLM2-135M.

The weights load once per process (from the dequantized cache after the first
run on a machine, see llm_models.llama.weights). One short conversation, the
prompt and the model's own greedy answer (a few dozen tokens), serves every test.
"""

from __future__ import annotations

import unittest

import torch

from kv_cache.broken import RotaryResetDecoder
from llm_models.llama.config import LlamaDecoderConfig
from llm_models.llama.decode import cached_step_logits, prefill
from llm_models.llama.generate import smollm2
from llm_models.llama.testing import CHAT
from llm_models.llama.weights import trained

# float32 through 30 layers: the two implementations differ only in summation order (the cached path's attention
# runs other kernels than one full pass). Measured: 0 for the full sequence, ~7e-5 cached, on logits up to ~38.
ATOL = 1e-3
RTOL = 1e-4
BROKEN_MARGIN = 1.0  # a rotary-reset bug moves logits by tens (measured ~25 on the 5 + 7 chunking); 1.0 is far above ATOL
ANSWER_TOKENS = 24  # the answer stops at the end-of-turn token well before this (8 tokens on this prompt)


class TrainedWeights(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        cls.weights = trained()
        cls.chat = smollm2()
        cls.prompt = cls.chat.chat_ids(CHAT)
        prompt = torch.tensor([cls.prompt])
        with torch.inference_mode():
            generated = cls.weights.reference.generate(
                prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=ANSWER_TOKENS, do_sample=False,
                pad_token_id=cls.weights.tokenizer.eos_token_id)
            cls.hf_answer = generated[0, prompt.shape[1]:].tolist()
            cls.ids = generated  # (1, prompt + answer): the sequence every logit test runs
            cls.hf_logits = cls.weights.reference(generated).logits  # (1, T, vocab)

    def test_the_packaged_model_is_smollm2_135m_with_grouped_query_heads_and_a_tied_head(self) -> None:
        config = self.chat.model.config
        self.assertEqual(config, LlamaDecoderConfig())  # the defaults are SmolLM2-135M's
        self.assertIs(self.chat.model.head, self.chat.model.embedding)
        parameters = sum(p.numel() for p in self.chat.model.parameters())  # the tied matrix counted once
        self.assertEqual(parameters, 134_515_008)

    def test_full_sequence_logits_equal_transformers(self) -> None:
        with torch.inference_mode():
            ours = self.chat.model(self.ids)
        torch.testing.assert_close(ours, self.hf_logits, atol=ATOL, rtol=RTOL)

    def test_cached_logits_equal_transformers_full_pass_at_every_step(self) -> None:
        with torch.inference_mode():
            steps = cached_step_logits(self.chat.model, self.ids)  # one token per call, from position 0
        for t in range(self.ids.shape[1]):
            torch.testing.assert_close(steps[:, t], self.hf_logits[:, t], atol=ATOL, rtol=RTOL,
                                       msg=lambda m, t=t: f"step {t}: {m}")

    def test_chunked_prefill_of_five_then_seven_tokens_equals_one_full_pass(self) -> None:
        model = self.chat.model
        cache = model.new_cache(1, 12)
        with torch.inference_mode():
            first = prefill(model, self.ids[:, :5], cache)
            second = prefill(model, self.ids[:, 5:12], cache)  # rotated from position 5, the cache's length
        torch.testing.assert_close(torch.cat((first, second), dim=1), self.hf_logits[:, :12], atol=ATOL, rtol=RTOL)

    def test_restarting_rotary_positions_at_zero_for_each_chunk_is_caught(self) -> None:
        broken = RotaryResetDecoder(self.chat.model.config, self.weights.reference.state_dict())
        cache = broken.new_cache(1, 12)
        with torch.inference_mode():
            first = prefill(broken, self.ids[:, :5], cache)
            second = prefill(broken, self.ids[:, 5:12], cache)  # rotated from 0: meets the prefix at wrong distances
        torch.testing.assert_close(first, self.hf_logits[:, :5], atol=ATOL, rtol=RTOL)  # no prefix yet: still right
        difference = float((second - self.hf_logits[:, 5:12]).abs().max())
        self.assertGreater(difference, BROKEN_MARGIN)
        with self.assertRaises(AssertionError):
            torch.testing.assert_close(second, self.hf_logits[:, 5:12], atol=ATOL, rtol=RTOL)

    def test_greedy_generation_with_the_cache_gives_transformers_generate_tokens_and_text(self) -> None:
        ours = self.chat.generate(self.prompt, ANSWER_TOKENS)
        self.assertEqual(ours.ids, self.hf_answer)
        self.assertEqual(ours.text, self.weights.tokenizer.decode(self.hf_answer, skip_special_tokens=True))
        self.assertEqual(ours.finish_reason, "stop")  # it ended on <|im_end|>, before the limit

    def test_the_weights_are_trained_the_answer_names_paris(self) -> None:
        # Random or wrongly mapped weights would still agree with transformers on themselves; they would not know this.
        self.assertIn("Paris", self.chat.generate(self.prompt, ANSWER_TOKENS).text)

    def test_the_chat_template_opens_the_assistant_turn_after_the_default_system_prompt(self) -> None:
        text = self.weights.tokenizer.decode(self.prompt)
        self.assertTrue(text.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM"), text)
        self.assertTrue(text.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
                                      "<|im_start|>assistant\n"), text)


if __name__ == "__main__":
    unittest.main()
