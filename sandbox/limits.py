"""Size limits that bound what one operation of agent code may create."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Per-namespace limits; the defaults suit Crafter policies and reward functions."""

    max_items: int = 2_000_000
    """Longest str/bytes/list/... one operation may build (`'a' * n`, `l + l`, `s.ljust(n)`).
    A Crafter map is 64×64 = 4096 tiles: 2e6 is ~500× any legitimate need and at most
    ~16 MiB of pointers, so a single op cannot hurt the host."""
    max_int_bits: int = 1_000_000
    """Largest int `*`, `**`, `<<` may produce (~125 KiB; arithmetic on it takes ms, while
    `10 ** 10 ** 10` would take hours and gigabytes)."""
    max_int_work: int = 300_000_000
    """Largest estimated cost of one big-int C call that cannot be interrupted
    (three-argument `pow`: exponent bits × (modulus digits² + per-step overhead), in
    ~1 ns units): ~0.3 s on a slow core, the cost of the slowest `%` the bit limit allows,
    while `pow(3, m - 1, m)` with `m = (1 << 200000) + 7` would hold the GIL for days."""
    max_nesting: int = 10_000
    """Deepest tuple nesting agent code may hash (`hash`, set/dict keys, `in`, `d[k]`):
    CPython hashes a tuple by recursing in C without a depth check and overflows an 8 MiB
    thread stack somewhere past 100k levels; 10k keeps a 10× margin and exceeds any path
    kept as nested pairs on a 64×64 map (4096 tiles)."""
    max_format_width: int = 100_000
    """Largest width/precision in f-strings and `%`-formatting (`f"{x:>{10**10}}"`)."""
    max_math_n: int = 10_000
    """Largest n for math.factorial/comb/perm (10000! has 35,660 digits, ~ms to compute)."""
    memory_bytes: int = 512 * 2**20
    """Growth of the process's resident memory allowed during one call into agent code.
    Crafter's env actor itself sits at ~200 MiB; 512 MiB leaves room for legitimate tables
    while keeping several actors safe on a small machine."""
    max_output_chars: int = 64 * 1024
    """Printed output kept per namespace: enough to debug thousands of steps, small enough
    to ship in a rollout message."""
    max_source_chars: int = 100_000
    """Longest source accepted (one policy is a few thousand lines at most; a composed
    setup of many stage modules gets a larger limit from its caller)."""
