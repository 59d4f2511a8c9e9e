"""The prefix-caching lab: requests that share a prefix, served with and without the serving engine's prefix cache.

The mechanism is the serving engine's (``llm_models.serving.prefix``: chained block hashes, a radix tree, the caching pool);
this package holds what the lab measures it on: workloads from real text (``workloads``), in-process runs of the
scheduler (``runs``), warm against cold logits (``equivalence``), broken variants the tests must catch (``broken``)
and the benchmark that writes the record.
"""
