"""StreamSampler: a deterministic endless stream that resumes at any position and shards by rank."""

import itertools

from core.data import StreamSampler


def take(sampler, n):
    return list(itertools.islice(iter(sampler), n))


def test_each_epoch_is_a_permutation_and_epochs_differ():
    stream = take(StreamSampler(10, seed=3), 30)
    epochs = [stream[i : i + 10] for i in (0, 10, 20)]
    assert all(sorted(e) == list(range(10)) for e in epochs)
    assert epochs[0] != epochs[1]


def test_resume_continues_exactly_where_the_stream_stopped():
    full = take(StreamSampler(7, seed=1), 40)
    for start in (0, 3, 7, 13, 29):
        assert take(StreamSampler(7, seed=1, start=start), 40 - start) == full[start:]


def test_ranks_split_the_same_stream():
    full = take(StreamSampler(9, seed=2), 20)
    r0 = take(StreamSampler(9, seed=2, rank=0, world_size=2), 10)
    r1 = take(StreamSampler(9, seed=2, rank=1, world_size=2), 10)
    assert r0 == full[0::2] and r1 == full[1::2]
    r1_resumed = take(StreamSampler(9, seed=2, start=4, rank=1, world_size=2), 6)
    assert r1_resumed == full[9::2]


def test_ranks_take_micro_batch_blocks_like_gradient_accumulation():
    """2 ranks with micro batch 3 see, per step, the same two micro-batches as 1 process accumulating 2."""
    full = take(StreamSampler(11, seed=5, block=3), 24)
    one = [full[i : i + 3] for i in range(0, 24, 3)]  # 1 process: micro-batches 0, 1 | 2, 3 | ...
    r0 = take(StreamSampler(11, seed=5, rank=0, world_size=2, block=3), 12)
    r1 = take(StreamSampler(11, seed=5, rank=1, world_size=2, block=3), 12)
    for step in range(4):
        assert r0[3 * step : 3 * step + 3] == one[2 * step] and r1[3 * step : 3 * step + 3] == one[2 * step + 1]
    resumed = take(StreamSampler(11, seed=5, start=6, rank=1, world_size=2, block=3), 6)  # after 2 steps
    assert resumed == r1[6:]
