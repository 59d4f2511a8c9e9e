"""The trained SmolLM2-135M-Instruct behind an OpenAI-style chat API (``make lab-server MODEL=smollm2``).

A subpackage on purpose: the serving lab's record fingerprints ``kv_serving/*.py``, and nothing it measures
imports this.
"""

from .app import create_chat_app, parse_chat_body, parse_completion_body

__all__ = ["create_chat_app", "parse_chat_body", "parse_completion_body"]
