"""llm_models.gathered: many tensors copied into one buffer, each on a cache line, values and ties kept."""

from __future__ import annotations

import torch

from llm_models.gathered import ALIGN_BYTES, gather_parameters, gathered, gathered_empty
from llm_models.llama.tiny import tiny_pair


def storage_of(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def test_copies_equal_their_tensors_in_one_buffer_each_on_a_cache_line() -> None:
    generator = torch.Generator().manual_seed(0)
    tensors = [torch.randn(5, 7, generator=generator),  # 140 bytes: the next start is rounded up
               torch.randint(-128, 128, (3, 11), generator=generator, dtype=torch.int8),
               torch.randn(8, 6, generator=generator).t(),  # not contiguous
               torch.randn(1, generator=generator, dtype=torch.float64)]
    copies = gathered(tensors)
    assert len({storage_of(copy) for copy in copies}) == 1
    for tensor, copy in zip(tensors, copies):
        assert (copy.dtype, copy.shape) == (tensor.dtype, tensor.shape)
        assert copy.is_contiguous()
        assert torch.equal(copy, tensor)
        assert copy.data_ptr() % ALIGN_BYTES == 0
    ends = [(copy.data_ptr(), copy.data_ptr() + copy.numel() * copy.element_size()) for copy in copies]
    assert all(end <= start for (_, end), (start, _) in zip(ends, ends[1:]))  # in order, none overlapping
    copies[0].zero_()
    assert tensors[0].abs().sum() > 0  # copies, not the tensors themselves


def test_gathering_a_decoders_parameters_keeps_its_logits_and_its_tied_head() -> None:
    _, model = tiny_pair(seed=3)
    tokens = torch.tensor([[1, 5, 9, 2]])
    with torch.inference_mode():
        before = model(tokens, model.new_cache(1, 8))
    names = [name for name, _ in model.named_parameters()]
    gather_parameters(model)
    assert [name for name, _ in model.named_parameters()] == names
    assert len({storage_of(p) for p in model.parameters()} | {storage_of(b) for b in model.buffers()}) == 1
    if model.config.tie_embeddings:
        assert model.head is model.embedding
    with torch.inference_mode():
        after = model(tokens, model.new_cache(1, 8))
    assert torch.equal(before, after)


def test_empty_places_have_their_shapes_in_one_buffer_each_on_a_cache_line() -> None:
    places = gathered_empty([((5, 7), torch.float32), ((3,), torch.int8), ((2, 2), torch.float64)])
    assert [(tuple(place.shape), place.dtype) for place in places] == [
        ((5, 7), torch.float32), ((3,), torch.int8), ((2, 2), torch.float64)]
    assert len({storage_of(place) for place in places}) == 1
    assert all(place.data_ptr() % ALIGN_BYTES == 0 and place.is_contiguous() for place in places)
    for value, place in enumerate(places):  # none overlaps another: each keeps what was written into it
        place.fill_(value + 1)
    assert [place.unique().tolist() for place in places] == [[1.0], [2], [3.0]]
