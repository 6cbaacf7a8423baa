"""Communication split into transfer and waiting for peers, read from the simulator's log.

The rule: a collective cannot move data before every rank of its group has issued it. The k-th
collective a rank issues on a group is matched with the k-th of every other member (ASTRA-sim
requires every member to issue a group's collectives in the same order). If rank r issues it at
``t_r`` and its callback comes at ``e_r``, and the group's last member issues it at ``A = max t``,
rank r *waits for peers* ``min(A, e_r) - t_r`` and *transfers* the rest, ``e_r - t_r`` minus that.
A rank that arrives last waits nothing: its whole collective is transfer. Sends and receives are
counted as transfer (a receive's wait for its send is not separated). A collective with no
callback (a rank that did not finish) counts nothing.

The groups are the ``pg_name`` of each collective node; a job without communicator sub-groups has
only the default group, and its files need not be read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .logs import RankLog

GroupOf = Mapping[tuple[int, int], str]  # (rank, collective node id) -> its group ("0": every rank)


def waiting_for_peers(ranks: Sequence[RankLog], group_of: GroupOf | None = None) -> list[int]:
    """Per rank, the ns its collectives spent waiting for the last member of their group to issue them."""
    sequences: dict[str, dict[int, list[list[int]]]] = {}  # group -> rank -> its collectives on it, in order
    for log in ranks:
        for entry in log.collectives:
            group = "0" if group_of is None else group_of.get((log.rank, entry[0]), "0")
            sequences.setdefault(group, {}).setdefault(log.rank, []).append(entry)
    waited = [0] * len(ranks)
    for per_rank in sequences.values():
        longest = max(len(seq) for seq in per_rank.values())
        for k in range(longest):
            issued = [(rank, seq[k]) for rank, seq in per_rank.items() if k < len(seq)]
            last = max(entry[1] for _, entry in issued)
            for rank, (_, start, end) in issued:
                if end >= 0:
                    waited[rank] += min(last, end) - start
    return waited
