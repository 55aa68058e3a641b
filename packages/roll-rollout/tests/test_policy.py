from __future__ import annotations

import asyncio

import pytest
from roll_rollout import (
    BatchingPolicy,
    GenerateRequest,
    GenerateResult,
    PayloadError,
    RandomPolicy,
    RemotePolicy,
    SamplingSettings,
)
from roll_rollout.policies.policy import (
    decode_request,
    decode_requests,
    decode_result,
    encode_request,
    encode_result,
    encode_results,
)


def echo_backend(calls):
    def generate_batch(requests):
        calls.append([r.prompt_ids[0] for r in requests])
        return [GenerateResult([r.prompt_ids[0] + 1], [-0.1], "stop", 0) for r in requests]

    return generate_batch


def test_concurrent_requests_are_batched_and_answered_in_order():
    calls: list[list[int]] = []
    policy = BatchingPolicy(echo_backend(calls))

    async def main():
        s = SamplingSettings()
        return await asyncio.gather(*(policy.generate(GenerateRequest([i], s)) for i in range(20)))

    results = asyncio.run(main())
    assert [r.output_ids[0] for r in results] == [i + 1 for i in range(20)]
    assert sorted(x for c in calls for x in c) == list(range(20))
    assert len(calls) < 20  # batched, not one call per request
    assert max(len(c) for c in calls) > 1


def test_batches_never_mix_sampling_settings_and_respect_max_size():
    seen: list[set[float]] = []

    def backend(requests):
        seen.append({r.sampling.temperature for r in requests})
        assert len(requests) <= 3
        return [GenerateResult([], [], "stop", 0) for _ in requests]

    policy = BatchingPolicy(backend, max_batch_size=3)

    async def main():
        reqs = [GenerateRequest([i], SamplingSettings(temperature=1.0 + (i % 2))) for i in range(10)]
        await asyncio.gather(*(policy.generate(r) for r in reqs))

    asyncio.run(main())
    assert all(len(s) == 1 for s in seen)


def test_backend_failure_fails_only_its_requests():
    def backend(requests):
        if any(r.prompt_ids == [13] for r in requests):
            raise RuntimeError("boom")
        return [GenerateResult([1], [0.0], "stop", 0) for _ in requests]

    policy = BatchingPolicy(backend)

    async def main():
        bad = await asyncio.gather(
            policy.generate(GenerateRequest([13], SamplingSettings())), return_exceptions=True
        )
        good = await policy.generate(GenerateRequest([1], SamplingSettings()))
        return bad, good

    bad, good = asyncio.run(main())
    assert isinstance(bad[0], RuntimeError)
    assert good.output_ids == [1]


def test_msgpack_round_trip_and_remote_policy():
    req = GenerateRequest([1, 2, 3], SamplingSettings(max_new_tokens=4, greedy=True))
    assert decode_request(encode_request(req)) == req
    res = GenerateResult([5, 6], [-1.0, -2.0], "length", 7)
    assert decode_result(encode_result(res)) == res
    with pytest.raises(PayloadError):
        decode_request(b"\xc1")
    with pytest.raises(PayloadError):
        decode_result(encode_request(req))

    server = BatchingPolicy(echo_backend([]))
    remote = RemotePolicy(server.generate_many_payload)
    out = asyncio.run(remote.generate(GenerateRequest([41], SamplingSettings())))
    assert out.output_ids == [42]


def test_remote_policy_sends_concurrent_requests_in_one_call():
    server = BatchingPolicy(echo_backend([]))
    calls: list[int] = []

    async def remote(payload: bytes) -> bytes:
        calls.append(len(decode_requests(payload)))
        return await server.generate_many_payload(payload)

    async def main():
        client = RemotePolicy(remote)
        first = await asyncio.gather(
            *(client.generate(GenerateRequest([i], SamplingSettings())) for i in range(10))
        )
        second = await client.generate(GenerateRequest([100], SamplingSettings()))
        return first, second

    first, second = asyncio.run(main())
    assert [r.output_ids for r in first] == [[i + 1] for i in range(10)]  # each answer reaches its caller
    assert second.output_ids == [101] and calls == [10, 1]


def test_a_request_made_while_a_call_is_in_flight_is_sent_without_waiting_for_another():
    """A request that arrives during a call, with no request after it, is sent (it must not wait forever)."""
    server = BatchingPolicy(echo_backend([]))
    calls: list[int] = []

    async def slow_remote(payload: bytes) -> bytes:
        calls.append(len(decode_requests(payload)))
        await asyncio.sleep(0.2)
        return await server.generate_many_payload(payload)

    async def main():
        client = RemotePolicy(slow_remote)
        first = asyncio.get_running_loop().create_task(
            client.generate(GenerateRequest([1], SamplingSettings()))
        )
        await asyncio.sleep(0.05)  # the first call is in flight now
        async with asyncio.timeout(5):
            late = await client.generate(GenerateRequest([7], SamplingSettings()))
        return await first, late

    first, late = asyncio.run(main())
    assert first.output_ids == [2] and late.output_ids == [8] and calls == [1, 1]


def test_remote_policy_fails_only_the_requests_of_a_bad_answer():
    async def wrong_count(payload: bytes) -> bytes:
        return encode_results([])

    async def main():
        client = RemotePolicy(wrong_count)
        return await asyncio.gather(
            client.generate(GenerateRequest([1], SamplingSettings())), return_exceptions=True
        )

    (err,) = asyncio.run(main())
    assert isinstance(err, PayloadError) and "expected 1 generate results, got 0" in str(err)
    with pytest.raises(PayloadError, match="list of msgpack payloads"):
        decode_requests(encode_request(GenerateRequest([1], SamplingSettings())))


def test_random_policy_stops_at_stop_id():
    policy = RandomPolicy([1, 2, 3], seed=0, stop_id=3)
    outs = [
        asyncio.run(policy.generate(GenerateRequest([0], SamplingSettings(max_new_tokens=50))))
        for _ in range(5)
    ]
    for out in outs:
        assert out.finish_reason == "stop" and out.output_ids[-1] == 3
        assert 3 not in out.output_ids[:-1]


def test_batching_policy_fails_a_short_batch_instead_of_hanging():
    def drops_one(requests):
        return [GenerateResult([1], [-0.1], "stop", 0) for _ in requests[1:]]

    async def main():
        policy = BatchingPolicy(drops_one)
        first = await asyncio.wait_for(
            asyncio.gather(
                *(policy.generate(GenerateRequest([i], SamplingSettings())) for i in range(3)),
                return_exceptions=True,
            ),
            timeout=10,
        )
        return first

    errors = asyncio.run(main())
    assert all(isinstance(e, PayloadError) and "expected 3 generate results, got 2" in str(e) for e in errors)


def test_request_list_names_the_item_that_is_not_a_payload():
    import msgpack

    good = encode_request(GenerateRequest([1], SamplingSettings()))
    with pytest.raises(PayloadError, match="item 1 is int"):
        decode_requests(msgpack.packb([good, 7]))


def test_a_sample_key_travels_with_its_request_and_is_optional():
    keyed = GenerateRequest([1, 2], SamplingSettings(), sample_key=2**63 - 1)
    assert decode_request(encode_request(keyed)) == keyed
    plain = GenerateRequest([1, 2], SamplingSettings())
    assert decode_request(encode_request(plain)).sample_key is None
    with pytest.raises(PayloadError, match="sample_key"):
        decode_request(encode_request(GenerateRequest([1], SamplingSettings(), sample_key=-1)))

    seen = []

    def backend(requests):
        seen.extend(r.sample_key for r in requests)
        return [GenerateResult([1], [-0.1], "stop", 0) for _ in requests]

    remote = RemotePolicy(BatchingPolicy(backend).generate_many_payload)

    async def main():
        await asyncio.gather(remote.generate(keyed), remote.generate(plain))

    asyncio.run(main())
    assert sorted(seen, key=str) == sorted([2**63 - 1, None], key=str)  # the server sees each request's key
