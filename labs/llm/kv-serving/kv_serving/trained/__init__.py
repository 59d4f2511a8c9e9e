"""The trained SmolLM2-135M-Instruct behind an OpenAI-style chat API (``make lab-server MODEL=smollm2``).

A subpackage on purpose: nothing the serving lab measures imports it, so the lab's fingerprint leaves it out
(tests/test_layout.py checks the fingerprint against what the benchmark imports).
"""

from .app import create_chat_app, parse_chat_body, parse_completion_body

__all__ = ["create_chat_app", "parse_chat_body", "parse_completion_body"]
