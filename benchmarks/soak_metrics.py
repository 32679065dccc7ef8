"""What the soak (``benchmarks/soak.py``) measures and how it sums it up: per-process RSS and open file
descriptors read from /proc, lag samples, fault windows, the growth and percentile rules of its last line, and
the plot. Everything but ``read_proc``, ``job_processes`` and ``plot`` is pure (tests/unit/test_soak_metrics.py).

Rules (docs/benchmarks.md, the soak):

* growth of a process: its last sample against its first sample at or after the baseline (minute 5; the first
  sample of the run when the run is too short to have a sample after minute 5 other than its last), in percent;
  the line reports the worst process. A process is named by its role (``ssrc-a-1``, ``job:jvm``...), not its pid:
  a member restarted by a fault is the same process for this rule, so its growth compares two incarnations
  (a restart can only make it look smaller).
* fds: the open descriptors a leak would grow, i.e. all but two kinds sampled apart and logged beside them:
  a broker's store files (a path in a ``commitlog`` or ``consumequeue`` directory: the store holds one per file
  retained, in a pool capped by ``max_open_files``, so their number follows the data written; 8 MiB segments in
  the soak: +16 in 30 minutes) and established TCP connections (their number is the clients' choice: a failover
  moves the producers', consumers', the replicator's and the replicas' connections to the promoted member, and
  each PySpark worker the job forks has its own). A socket the process forgot to close still counts: once its
  peer is gone it sits in CLOSE_WAIT, not ESTABLISHED.
* lag p99: nearest-rank 99th percentile of the lag samples taken outside every fault window; a window runs from
  the injection until the link is healthy again after the heal, plus a grace period.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path

from tests.support.tcp_table import ESTABLISHED, tcp_sockets

BASELINE_S = 300.0
"""Minute 5: growth is counted from here, after the JIT, caches and Spark's first batches settled."""


@dataclass(frozen=True)
class ProcSample:
    t: float
    """Seconds since the soak started."""
    name: str
    rss: int
    """Bytes (VmRSS); for a role of several processes (PySpark's workers) the largest one's."""
    fds: int
    processes: int = 1
    """Live processes of the role (PySpark forks and reaps workers as the job runs)."""
    store_fds: int = 0
    """Descriptors of the role's store files, not in ``fds`` (see the module docstring)."""
    connections: int = 0
    """Established TCP connections, not in ``fds``."""


@dataclass(frozen=True)
class LagSample:
    t: float
    lag_s: float | None
    """The replication lag (``effective_lag``); None: the endpoint did not answer or has no heartbeat yet."""
    age_s: float | None
    """Heartbeat age: now - born time of the newest heartbeat that reached the target."""


@dataclass(frozen=True)
class FaultWindow:
    kind: str
    victim: str
    start: float
    end: float

    def covers(self, t: float) -> bool:
        return self.start <= t <= self.end


def effective_lag(lag_s: float | None, age_s: float | None, interval_s: float | None) -> float | None:
    """The replication lag now: the lag of the newest heartbeat on the target (``jobs.lag``'s "lag now"), or more
    when heartbeats stopped arriving: the one born ``interval`` after the newest has not arrived although it is
    ``age - interval`` old (the lag gauge alone would keep showing the last arrival's lag through a stall)."""
    if lag_s is None:
        return None
    if age_s is None or interval_s is None:
        return lag_s
    return max(lag_s, age_s - interval_s)


STORE_DIRS = frozenset({"commitlog", "consumequeue"})


def read_proc(pid: int, established: AbstractSet[int] = frozenset()) -> tuple[int, int, int, int] | None:
    """(RSS bytes, other fds, store files, established connections) of ``pid`` from /proc (``count_fds``);
    None when it is gone (or a zombie). ``established``: ``established_sockets()``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        names = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return None
    other, store, connections = count_fds((_fd_target(pid, name) for name in names), established)
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024, other, store, connections
    return None  # a zombie has no VmRSS


def _fd_target(pid: int, fd: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:  # closed meanwhile
        return ""


def count_fds(targets: Iterable[str], established: AbstractSet[int]) -> tuple[int, int, int]:
    """(other, store files, established connections) among fd targets as /proc/<pid>/fd links read
    (``socket:[inode]`` for a socket); see the module docstring."""
    other = store = connections = 0
    for target in targets:
        if is_store_file(target):
            store += 1
        elif target.startswith("socket:[") and int(target[8:-1]) in established:
            connections += 1
        else:
            other += 1
    return other, store, connections


def established_sockets() -> frozenset[int]:
    """Inodes of the established TCP sockets (IPv4 and IPv6) of this network namespace."""
    return frozenset(tcp_sockets(ESTABLISHED))


def is_store_file(target: str) -> bool:
    """Whether an fd's target is a broker's store file (a file in a ``commitlog`` / ``consumequeue`` tree)."""
    return target.startswith("/") and not STORE_DIRS.isdisjoint(Path(target).parts[:-1])


def job_role(argv: Sequence[bytes], script: str) -> str:
    """The role of one process of a ``spark-submit jobs/<script>`` job from its argv: the JVM, the Python
    driver, or one of PySpark's Python workers (daemon and forked workers, summed as one role)."""
    exe = os.path.basename(argv[0]) if argv else b""
    if b"java" in exe:
        return "job:jvm"
    if len(argv) > 1 and argv[1].endswith(os.fsencode(script)):
        return "job:driver"
    return "job:pyspark-workers"


def job_processes(pids: Iterable[int], script: str) -> dict[str, list[int]]:
    """``pids`` of a job by role (``job_role``); processes gone meanwhile are left out."""
    roles: dict[str, list[int]] = defaultdict(list)
    for pid in pids:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0]:
            roles[job_role(argv, script)].append(pid)
    return dict(roles)


def sample_roles(t: float, roles: Mapping[str, Sequence[int]]) -> list[ProcSample]:
    """One sample per role (a role with no live pid is left out). A role of several processes is its largest
    one (by RSS): forked PySpark workers share most of their pages with the daemon they forked from, so a sum
    of RSS would count those pages once per worker, and their number changes as Spark forks and reaps them."""
    out = []
    established = established_sockets()
    for name, pids in roles.items():
        read = [r for r in (read_proc(p, established) for p in pids) if r is not None]
        if read:
            rss, fds, store_fds, connections = max(read)
            out.append(ProcSample(t, name, rss, fds, len(read), store_fds, connections))
    return out


def growth(samples: Iterable[ProcSample], field: str, baseline_s: float = BASELINE_S) -> dict[str, float]:
    """Per process: percent growth of ``field`` ("rss" or "fds") from its baseline sample to its last one (see the
    module docstring for the baseline). A process sampled once has grown 0 %."""
    by_name: dict[str, list[ProcSample]] = defaultdict(list)
    for s in samples:
        by_name[s.name].append(s)
    out = {}
    for name, series in by_name.items():
        series.sort(key=lambda s: s.t)
        last = series[-1]
        after = [s for s in series[:-1] if s.t >= baseline_s]
        first = after[0] if after else series[0]
        base, end = getattr(first, field), getattr(last, field)
        out[name] = 0.0 if base <= 0 else (end - base) * 100.0 / base
    return out


def worst(growths: Mapping[str, float]) -> tuple[str, float]:
    """The process that grew most, and by how much (("-", 0.0) with nothing sampled)."""
    if not growths:
        return "-", 0.0
    name = max(growths, key=lambda n: growths[n])
    return name, growths[name]


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[rank - 1]


def lag_outside(samples: Iterable[LagSample], windows: Sequence[FaultWindow]) -> list[float]:
    """The lag of every sample that has one and falls outside every fault window."""
    return [s.lag_s for s in samples
            if s.lag_s is not None and not any(w.covers(s.t) for w in windows)]


def rate_series(times: Sequence[float], counts: Sequence[int], bin_s: float) -> tuple[list[float], list[float]]:
    """Events (``counts[i]`` at ``times[i]``) per second in bins of ``bin_s``: (bin starts, rates)."""
    if not times:
        return [], []
    bins: dict[int, int] = defaultdict(int)
    for t, n in zip(times, counts, strict=True):
        bins[int(t // bin_s)] += n
    last = max(bins)
    starts = [i * bin_s for i in range(last + 1)]
    return starts, [bins.get(i, 0) / bin_s for i in range(last + 1)]


def summary_line(minutes: float, faults: int, produced: int, replicated: int, lost: int, duplicates: int,
                 rss_growth: float, fd_growth: float, lag_p99: float) -> str:
    """The soak's last line, exactly as docs/benchmarks.md spells it."""
    return (f"soak {minutes:g} min, faults {faults}, produced {produced}, replicated {replicated}, lost {lost}, "
            f"duplicates {duplicates}, rss growth {rss_growth:.1f} %, fd growth {fd_growth:.1f} %, "
            f"lag p99 {lag_p99:.2f} s")


def process_line(last: ProcSample, rss_pct: float, fd_pct: float, broker_role: str, store_fd_cap: int) -> str:
    """The log's line for one process: ``last`` its end sample, its growths, and ``broker_role`` ("primary" /
    "replica" as the name server lists the member at the end of the run; "" for others, or a group listing no
    primary then). The role is the one thing of a broker's fds that tells its connections apart (clients follow
    the primary), so it is read once, at the end, beside the last sample it explains."""
    return (f"  {last.name}: RSS {last.rss / 2**20:.0f} MiB ({rss_pct:+.1f} %), fds {last.fds} ({fd_pct:+.1f} %"
            + f"; {last.connections} connections" + (f" as {broker_role}" if broker_role else "")
            + (f"; store files {last.store_fds} of max_open_files {store_fd_cap})" if last.store_fds else ")")
            + (f" (largest of {last.processes} processes)" if last.processes > 1 else ""))


def plot(path: Path, procs: Sequence[ProcSample], lags: Sequence[LagSample], windows: Sequence[FaultWindow],
         produced: tuple[Sequence[float], Sequence[int]], consumed: tuple[Sequence[float], Sequence[int]],
         bin_s: float = 10.0) -> None:
    """A PNG of RSS per process, lag and heartbeat age, and throughput over time; fault windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_rss, ax_lag, ax_rate) = plt.subplots(3, 1, figsize=(12, 11), sharex=True)
    by_name: dict[str, list[ProcSample]] = defaultdict(list)
    for s in procs:
        by_name[s.name].append(s)
    for name, series in sorted(by_name.items()):
        series.sort(key=lambda s: s.t)
        ax_rss.plot([s.t / 60 for s in series], [s.rss / 2**20 for s in series], marker=".", label=name)
    ax_rss.set_ylabel("RSS (MiB)")
    ax_rss.set_yscale("log")
    ax_rss.legend(fontsize=7, ncol=4, loc="upper left")
    # NaN where the endpoint did not answer: the line breaks there instead of bridging the gap
    minutes = [s.t / 60 for s in lags]
    ax_lag.plot(minutes, [math.nan if s.lag_s is None else s.lag_s for s in lags], label="replication lag (s)")
    ax_lag.plot(minutes, [math.nan if s.age_s is None else s.age_s for s in lags], label="heartbeat age (s)",
                alpha=0.6)
    ax_lag.set_ylabel("seconds")
    ax_lag.set_yscale("symlog", linthresh=1.0)
    ax_lag.legend(fontsize=8, loc="upper left")
    for label, (times, counts) in (("produced (acknowledged)", produced), ("consumed from the target", consumed)):
        starts, rates = rate_series(times, counts, bin_s)
        ax_rate.step([t / 60 for t in starts], rates, where="post", label=label)
    ax_rate.set_ylabel(f"msg/s ({bin_s:g} s bins)")
    ax_rate.set_xlabel("minutes")
    ax_rate.legend(fontsize=8, loc="upper left")
    for ax in (ax_rss, ax_lag, ax_rate):
        for w in windows:
            ax.axvspan(w.start / 60, w.end / 60, color="red", alpha=0.08)
        ax.grid(alpha=0.3)
    for w in windows:
        ax_lag.annotate(w.kind, (w.start / 60, 0.97), xycoords=ax_lag.get_xaxis_transform(), fontsize=7,
                        rotation=90, va="top")
    ax_rss.set_title("soak: RSS per process, replication lag, throughput (shaded: fault windows)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
