"""ASTRA-sim's time for one chunk's all-reduce over one dimension of its congestion-unaware
analytical network, per algorithm, as it computes it (518bd51: ``Ring.cc``, ``HalvingDoubling.cc``,
``PacketBundle.cc``, ``MemBus.cc``; astra-network-analytical 599a047: ``BasicTopology.cpp``,
``Ring.cpp``), and the fit of a small group's link to a wide one's times: the models behind the
reduced job (``reduced.py``, docs/reduced.md).

A message of m bytes over h hops costs ``int(h * latency + m / bw)`` ns (bw in bytes/ns, 1 GB =
2**30 bytes), then the endpoint delay e on arrival; a reduction of m bytes ``3 * int(m / M)`` ns
(M: ``local-mem-bw``).
"""

from __future__ import annotations

from collections.abc import Callable

#: Hops between two neighbours of a logical ring, per physical topology (astra-network-analytical).
HOPS = {"Ring": 1, "Switch": 2, "FullyConnected": 1}
BYTES_PER_GB = 1 << 30  # the analytical backend's GB (bw_GBps_to_Bpns)


def last_chunk(chunk: int, before: tuple[int, ...], algorithms: list[str]) -> int:
    """The bytes a chunk has left when it reaches the last dimension: a reduce-scatter a dimension
    (its ``final_data_size``, ``data_size / nodes``), but doubleBinaryTree all-reduces a dimension
    whatever the phase (``Sys::generate_collective_phase``), keeping the bytes."""
    for n, algorithm in zip(before, algorithms, strict=False):
        if n > 1 and algorithm != "doubleBinaryTree":
            chunk //= n
    return chunk


def ring_all_reduce_ns(
    n: int, hops: int, latency: float, bandwidth_gbps: float, chunk: int, endpoint: int, mem_gbps: float
) -> int:
    """ASTRA-sim's time for one chunk's ring all-reduce over n NPUs (ns), as it computes it."""
    message = chunk // n
    bpns = bandwidth_gbps * BYTES_PER_GB / 1e9
    net = int(hops * latency + message / bpns)
    reduce = 3 * int(message / (mem_gbps * 1e9) * 1e9)
    return endpoint + 2 * (n - 1) * (net + endpoint) + (n - 1) * reduce


def halving_doubling_all_reduce_ns(
    n: int, topology: str, latency: float, bandwidth_gbps: float, chunk: int, endpoint: int, mem_gbps: float
) -> int:
    """ASTRA-sim's time for one chunk's halving-doubling all-reduce over n NPUs (ns; n a power of
    two), as ``HalvingDoubling.cc`` sends it: log2(n) messages to the NPU at offset 1, 2, .., n/2 of
    c/2, c/4, .., c/n bytes (the reduce-scatter half, each reduced on arrival), then back from
    offset n/2 to 1 with c/n, .., c/2 bytes; a message crosses the offset's hops (a Ring: the
    shorter way round; a Switch: 2; FullyConnected: 1), each one after the previous one's arrival."""
    bpns = bandwidth_gbps * BYTES_PER_GB / 1e9
    steps = n.bit_length() - 1
    total, message, offset, multiplier = endpoint, chunk // 2, 1, 2.0
    for step in range(2 * steps):
        hops = min(offset, n - offset) if topology == "Ring" else HOPS[topology]
        total += int(hops * latency + message / bpns) + endpoint
        if step < steps:
            total += 3 * int(message / (mem_gbps * 1e9) * 1e9)
        offset, message = int(offset * multiplier), int(message / multiplier)
        if offset == n:
            multiplier = 0.5
            offset, message = int(offset * multiplier), int(message / multiplier)
    return total


def fit_group(
    n: int,
    k: int,
    hops: int,
    latency: float,
    bandwidth: float,
    chunks: list[int],
    endpoint: int,
    mem: float,
    full_ns: Callable[[int], int] | None = None,
) -> tuple[float, float, float] | None:
    """(latency ns, bandwidth GB/s, worst relative error) of a ring of k NPUs that times each chunk as
    a ring of n does (or as ``full_ns(chunk)`` says the last dimension of the full job does: its
    bytes a chunk must be the ring's, 2(n-1)/n of it sent), or None if none is positive."""
    if full_ns is None:

        def full_ns(c: int) -> int:
            return ring_all_reduce_ns(n, hops, latency, bandwidth, c, endpoint, mem)

    bpns = bandwidth * BYTES_PER_GB / 1e9
    inverse = ((n - 1) * k / (n * (k - 1)) * (2 / bpns + 3 / mem) - 3 / mem) / 2  # ns per byte
    if not inverse > 0:
        return None
    # per chunk, the ns each of the 2(k-1) messages must take, int(hL' + m'/B') == target: aim at
    # the middle of the target's ns; the full ring's rounding (up to 2(n-1) ns a chunk, depending on
    # the message) is matched on the job's own chunks by a least-squares line, weighted by 1/time,
    # whose slope may move B' by 5% at most (chunks of nearly one size: rounding noise, not a slope)
    points = []
    for c in chunks:
        want = full_ns(c)
        rest = want - endpoint - 2 * (k - 1) * endpoint - (k - 1) * 3 * int((c // k) / (mem * 1e9) * 1e9)
        points.append((float(c // k), rest / (2 * (k - 1)) + 0.5, 2 * (k - 1) / want))
    link = sum(w * w * (t - m * inverse) for m, t, w in points) / sum(w * w for _, _, w in points)
    if len({m for m, _, _ in points}) > 1:
        sw = sum(w * w for _, _, w in points)
        mean_m = sum(w * w * m for m, _, w in points) / sw
        mean_t = sum(w * w * t for _, t, w in points) / sw
        slope = sum(w * w * (m - mean_m) * (t - mean_t) for m, t, w in points) / sum(
            w * w * (m - mean_m) ** 2 for m, _, w in points
        )
        if abs(slope / inverse - 1) <= 0.05 and mean_t - slope * mean_m >= 0:  # else rounding noise: keep B'
            inverse, link = slope, mean_t - slope * mean_m
    if link < 0:
        return None
    new_latency, new_bandwidth = link / hops, 1 / inverse * 1e9 / BYTES_PER_GB
    error = max(
        abs(ring_all_reduce_ns(k, hops, new_latency, new_bandwidth, c, endpoint, mem) - full_ns(c)) / full_ns(c)
        for c in chunks
    )
    return new_latency, new_bandwidth, error
