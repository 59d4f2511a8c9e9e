"""Chained block hashes, on the example of vLLM's "Automatic Prefix Caching" design document: a prompt cut into
blocks of 4 tokens, each block's hash standing for its own tokens and every token before it. A second prompt
matches the leading blocks it shares, never a block whose tokens agree after a different earlier block, never a
partial tail; hashes are the same in another process and extra keys tell otherwise equal blocks apart."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import unittest

from llm_models.serving.prefix import hashing
from llm_models.serving.prefix.hashing import NONE_HASH, block_hashes, hash_block

BLOCK = 4
# vLLM's example: "[A gentle breeze stirred] [the leaves as children] [laughed in the distance]", one id a word.
WORDS = ("A gentle breeze stirred the leaves as children laughed in the distance "
         "played park cold wind and then").split()
IDS = {word: 1000 + i for i, word in enumerate(dict.fromkeys(WORDS))}


def ids(text: str) -> list[int]:
    return [IDS[word] for word in text.split()]


DOC = ids("A gentle breeze stirred the leaves as children laughed in the distance")  # 3 full blocks
# Shares blocks 1 and 2, then differs: blocks 1 and 2 match, block 3 does not.
PARK = ids("A gentle breeze stirred the leaves as children played in the park")
# Differs in block 1 only: blocks 2 and 3 hold the same tokens as DOC's, after another prefix.
COLD = ids("A cold wind stirred the leaves as children laughed in the distance")


def matching_blocks(cached: list[int], prompt: list[int]) -> list[int]:
    """The indexes (0-based) of ``prompt``'s full blocks whose hash some block of ``cached`` has."""
    known = set(block_hashes(cached, BLOCK))
    return [i for i, digest in enumerate(block_hashes(prompt, BLOCK)) if digest in known]


# The module alone, loaded from its file: importing the package would import torch, seconds per process.
HASHES_IN_A_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("hashing", sys.argv[1])
hashing = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hashing)
print(json.dumps([[digest.hex() for digest in hashing.block_hashes(tokens, 4, tuple(extra))]
                  for tokens, extra in json.loads(sys.argv[2])]))
"""


class DocumentExample(unittest.TestCase):
    def test_the_example_prompt_has_one_hash_per_full_block(self) -> None:
        self.assertEqual(len(DOC), 12)
        self.assertEqual(len(block_hashes(DOC, BLOCK)), 3)

    def test_each_hash_chains_its_parents_hash_and_its_own_tokens(self) -> None:
        first = hash_block(NONE_HASH, DOC[0:4])
        second = hash_block(first, DOC[4:8])
        third = hash_block(second, DOC[8:12])
        self.assertEqual(block_hashes(DOC, BLOCK), [first, second, third])

    def test_a_prompt_sharing_two_leading_blocks_matches_exactly_those(self) -> None:
        self.assertEqual(matching_blocks(DOC, PARK), [0, 1])
        self.assertEqual(matching_blocks(PARK, DOC), [0, 1])

    def test_a_block_after_a_different_prefix_does_not_match(self) -> None:
        self.assertEqual(COLD[4:], DOC[4:])  # blocks 2 and 3 hold the very same tokens
        self.assertEqual(matching_blocks(DOC, COLD), [])
        # Not even the tokens of block 2 placed first: a block's hash depends on where the block sits.
        self.assertEqual(matching_blocks(DOC, DOC[4:8] + DOC[0:4]), [])

    def test_the_same_prompt_matches_every_block(self) -> None:
        self.assertEqual(matching_blocks(DOC, list(DOC)), [0, 1, 2])

    def test_the_partial_tail_block_is_never_hashed(self) -> None:
        tail = DOC + ids("and then")  # 14 tokens: 3 full blocks and 2 tokens of a fourth
        self.assertEqual(block_hashes(tail, BLOCK), block_hashes(DOC, BLOCK))
        self.assertEqual(block_hashes(DOC[:11], BLOCK), block_hashes(DOC, BLOCK)[:2])
        self.assertEqual(block_hashes(DOC[:3], BLOCK), [])
        self.assertEqual(block_hashes([], BLOCK), [])
        # A prompt that stops inside DOC's third block matches its first two and nothing of the third.
        self.assertEqual(matching_blocks(DOC, DOC[:10]), [0, 1])

    def test_a_block_size_below_one_is_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "block_size"):
            block_hashes(DOC, 0)


class Properties(unittest.TestCase):
    def test_random_prompts_match_exactly_their_common_leading_full_blocks(self) -> None:
        rng = random.Random(0)
        for trial in range(200):
            head = [rng.randrange(50) for _ in range(rng.randint(0, 17))]
            a = head + [rng.randrange(50) for _ in range(rng.randint(0, 9))]
            b = head + [rng.randrange(50) for _ in range(rng.randint(0, 9))]
            common = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            with self.subTest(trial=trial):
                self.assertEqual(matching_blocks(a, b), list(range(common // BLOCK)))

    def test_hashes_are_the_same_in_a_fresh_process(self) -> None:
        cases = [(DOC, []), (PARK, ["adapter-7"]), (list(range(-3, 30)), ["a", "b"])]
        here = [[digest.hex() for digest in block_hashes(tokens, BLOCK, tuple(extra))] for tokens, extra in cases]
        for seed in ("0", "12345"):  # Python's own str hash is salted by this; SHA-256 must not care
            with self.subTest(seed=seed):
                child = subprocess.run([sys.executable, "-c", HASHES_IN_A_CHILD, hashing.__file__, json.dumps(cases)],
                                       capture_output=True, text=True, timeout=60, check=True,
                                       env={**os.environ, "PYTHONHASHSEED": seed})
                self.assertEqual(json.loads(child.stdout), here)

    def test_extra_keys_separate_otherwise_equal_blocks(self) -> None:
        plain = block_hashes(DOC, BLOCK)
        adapter_a = block_hashes(DOC, BLOCK, ("adapter-a",))
        adapter_b = block_hashes(DOC, BLOCK, ("adapter-b",))
        self.assertEqual(block_hashes(DOC, BLOCK, ("adapter-a",)), adapter_a)  # same keys, same hashes
        for i in range(3):
            self.assertEqual(len({plain[i], adapter_a[i], adapter_b[i]}), 3)
        # Keys are told apart as a sequence, not as their concatenated text.
        self.assertNotEqual(block_hashes(DOC, BLOCK, ("ab",)), block_hashes(DOC, BLOCK, ("a", "b")))
        self.assertNotEqual(block_hashes(DOC, BLOCK, ("a", "b")), block_hashes(DOC, BLOCK, ("b", "a")))

    def test_a_token_id_beyond_one_byte_changes_the_hash(self) -> None:
        # Every token id is encoded whole (8 bytes): ids equal modulo 256 or 2**32 still differ.
        base = hash_block(NONE_HASH, [1, 2, 3, 4])
        for other in ([257, 2, 3, 4], [1 + 2**32, 2, 3, 4], [1, 2, 3, 4 + 2**40]):
            self.assertNotEqual(hash_block(NONE_HASH, other), base)
        self.assertNotEqual(hash_block(NONE_HASH, [1, 2, 3]), hash_block(NONE_HASH, [1, 2, 3, 0]))


class KeptHashes(unittest.TestCase):
    """A request's BlockKeys keeps the hashes it computed: the same chain as block_hashes, each block hashed once
    however often it is looked up, extended as tokens are appended, and computed again for another hasher."""

    def counting(self) -> tuple[list[int], hashing.Hasher]:
        calls: list[int] = []

        def hasher(parent: bytes, page: object) -> bytes:
            calls.append(1)
            return hash_block(parent, page)  # type: ignore[arg-type]
        return calls, hasher

    def test_kept_hashes_equal_the_chain_and_each_block_is_hashed_once(self) -> None:
        calls, hasher = self.counting()
        keys = hashing.BlockKeys(DOC)
        for count in (1, 3, 2, 3, 5):  # 5: only three blocks are full
            self.assertEqual(keys.hashes(BLOCK, count, hasher), block_hashes(DOC, BLOCK)[:count])
        self.assertEqual(len(calls), 3)

    def test_appended_tokens_extend_the_chain_and_a_slice_is_a_plain_list(self) -> None:
        calls, hasher = self.counting()
        keys = hashing.BlockKeys(DOC[:6])
        self.assertEqual(len(keys.hashes(BLOCK, 9, hasher)), 1)
        keys.extend(DOC[6:])
        self.assertEqual(keys.hashes(BLOCK, 9, hasher), block_hashes(DOC, BLOCK))
        self.assertEqual(len(calls), 3)
        self.assertEqual((len(keys), keys[0], keys[4:8]), (len(DOC), DOC[0], DOC[4:8]))
        self.assertIs(type(keys[4:8]), list)

    def test_another_hasher_or_block_size_computes_the_chain_again(self) -> None:
        keys = hashing.BlockKeys(DOC)
        keys.hashes(BLOCK, 3, hash_block)
        self.assertEqual(keys.hashes(BLOCK, 3, lambda parent, page: hash_block(NONE_HASH, page)),
                         [hash_block(NONE_HASH, DOC[i:i + BLOCK]) for i in range(0, 12, BLOCK)])
        self.assertEqual(keys.hashes(6, 2, hash_block), block_hashes(DOC, 6))



class Salts(unittest.TestCase):
    def test_a_salt_changes_every_blocks_hash_and_the_same_salt_gives_the_same_chain(self) -> None:
        plain, salted = block_hashes(DOC, BLOCK), block_hashes(DOC, BLOCK, salt="tenant")
        self.assertEqual(len(salted), 3)
        self.assertTrue(all(a != b for a, b in zip(plain, salted)))
        self.assertEqual(salted, block_hashes(DOC, BLOCK, salt="tenant"))
        self.assertNotEqual(salted, block_hashes(DOC, BLOCK, salt="tenant "))
        self.assertEqual(block_hashes(DOC, BLOCK, salt=None), plain)

    def test_a_requests_kept_hashes_start_from_its_salts_root(self) -> None:
        keys = hashing.BlockKeys(DOC, "tenant")
        self.assertEqual(keys.hashes(BLOCK, 3, lambda parent, page: hash_block(parent, page)),
                         block_hashes(DOC, BLOCK, salt="tenant"))
        self.assertEqual(hashing.root_hash(None), NONE_HASH)


if __name__ == "__main__":
    unittest.main()
