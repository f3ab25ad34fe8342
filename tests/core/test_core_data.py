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
