"""Admission by a cache format's real bytes: the same budget admits more requests in a smaller format, by
exactly the ratio of the formats' block bytes, and without a format the policy is what it always was."""

from __future__ import annotations

import unittest

from kv_quant.figures import SERVING, admitted_requests, serving_budget_bytes
from llm_models.cache_formats import CacheFormat, block_bytes
from llm_models.serving.admission import KVBudget
from llm_models.serving.engine import SERVING_LAYERS, SERVING_MODEL, EngineConfig
from llm_models.serving.pool import LayeredPool

BLOCK_SIZE = 16


def admitted(policy: KVBudget, pool: LayeredPool, blocks_per_request: int) -> int:
    """Requests the policy admits one after another, each reserving ``blocks_per_request`` blocks."""
    running = reserved = 0
    while policy.admits(running, reserved, blocks_per_request, pool):
        running, reserved = running + 1, reserved + blocks_per_request
    return running


class AdmissionByFormat(unittest.TestCase):
    def setUp(self) -> None:
        self.pool = LayeredPool(SERVING_MODEL, SERVING_LAYERS, num_blocks=4096, block_size=BLOCK_SIZE)

    def test_without_a_format_a_block_costs_the_pools_bytes_as_before(self) -> None:
        budget = 64 * self.pool.block_bytes
        self.assertEqual(KVBudget(budget).budget_blocks(self.pool), 64)
        self.assertEqual(KVBudget(budget).describe(), {"policy": "kv_budget_bytes", "kv_budget_bytes": budget})
        self.assertEqual(KVBudget(budget, CacheFormat("float32")).budget_blocks(self.pool), 64)

    def test_q4_0_admits_more_requests_by_exactly_the_formula_ratio(self) -> None:
        budget = 64 * self.pool.block_bytes  # 64 float32 blocks of 16 positions, 4 layers, 2 heads of 64
        float_block = block_bytes(CacheFormat("float32"), SERVING_LAYERS, BLOCK_SIZE, 2, 64)
        q4_block = block_bytes(CacheFormat("q4_0"), SERVING_LAYERS, BLOCK_SIZE, 2, 64)
        self.assertEqual(float_block, self.pool.block_bytes)
        self.assertEqual(float_block * 9, q4_block * 64)  # 4.5 bits per value against 32: exactly 64 / 9
        plain = admitted(KVBudget(budget), self.pool, blocks_per_request=8)
        quantized = admitted(KVBudget(budget, CacheFormat("q4_0")), self.pool, blocks_per_request=8)
        self.assertEqual(plain, 8)
        self.assertEqual(quantized, budget // q4_block // 8)
        self.assertEqual(quantized, 56)  # 64 x 64 / 9 = 455 blocks: 56 requests of 8 blocks, against 8
        self.assertEqual(KVBudget(budget, CacheFormat("q4_0")).describe()["cache_format"], "q4_0")

    def test_kivi_is_refused_because_its_residual_belongs_to_a_request(self) -> None:
        with self.assertRaisesRegex(ValueError, "kivi keeps a full-precision residual per request"):
            KVBudget(10**6, CacheFormat("kivi")).budget_blocks(self.pool)

    def test_the_quant_pages_serving_constants_are_the_serving_labs_defaults(self) -> None:
        engine = EngineConfig()
        self.assertEqual((SERVING["layers"], SERVING["kv_heads"], SERVING["head_dim"], SERVING["block_size"]),
                         (engine.layers, engine.model.kv_heads, engine.model.head_dim, engine.block_size))
        self.assertEqual(SERVING["bytes_per_element"], engine.model.bytes_per_element)
        self.assertEqual(serving_budget_bytes(), engine.policy.kv_budget_bytes)
        pool = LayeredPool(engine.model, engine.layers, num_blocks=4096, block_size=engine.block_size)
        blocks_per_request = -(-SERVING["positions"] // engine.block_size)
        for fmt in (CacheFormat("float32"), CacheFormat("int8"), CacheFormat("q4_0")):  # the page's figure is the policy's
            self.assertEqual(admitted_requests(fmt, serving_budget_bytes(), engine.layers, engine.block_size,
                                               engine.model.kv_heads, engine.model.head_dim, SERVING["positions"]),
                             admitted(KVBudget(serving_budget_bytes(), fmt), pool, blocks_per_request))

if __name__ == "__main__":
    unittest.main()
