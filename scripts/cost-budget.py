#!/usr/bin/env python3
"""Attributes each sample of `perf script -F ip,sym,dso` (demangled, on stdin) to a line of the cost budget: the line
named by the frame nearest the leaf; prints each line's share, and its µs per message when given the run's server CPU
per message (argv[1]). Used by scripts/cost-budget."""
import sys, re, collections
# (line, patterns): the first line whose pattern matches the frame nearest the leaf wins.
LINES = [
    ("tokenizing and mentions (event loop)", [r"SearchText\.", r"prepareSearch", r"Mentions\b", r"SearchIndex\.fullText"]),
    ("search index writes (indexer)", [r"indexQueuedSearch", r"setSearchTokens", r"writeSearch", r"fts5", r"SearchIndexer"]),
    ("group commit's rules", [r"GroupCommit\.", r"LogWrites", r"EventLogBook"]),
    ("SQL: loading rows", [r"SQLiteStore\.load\("]),
    ("SQL: SQLite itself and the batch's statements", [r"SQLiteStore\.write\(_:_:\)", r"writeLog", r"SQLiteStore\.write\(", r"sqlite3", r"Statement\.", r"Database\.", r"GRDB"]),
    ("fan-out (hub, fresh events)", [r"Hub\.", r"logsGrew", r"Fanout", r"freshRoom"]),
    ("encoding envelopes and frames", [r"NativeFrame\.init", r"serializedBytes", r"serializedData", r"Envelope\+Store", r"envelopes\(", r"\.frames\(for:", r"BinaryEncod", r"JSONEncod"]),
    ("decoding frames and envelopes", [r"NativeFrameDecoder", r"BinaryDecod", r"init\(serializedBytes", r"ByteToMessage", r"decodeLoop"]),
    ("the session and its machine", [r"SessionStateMachine", r"SessionHandler", r"SessionRequests", r"SessionContext", r"PendingWrites", r"DeadlineWheel", r"CommitTicket", r"CommitQueue"]),
    ("NIO pipeline and event loop", [r"ChannelPipeline", r"ChannelHandlerContext", r"SelectableEventLoop", r"BaseSocketChannel", r"BaseStreamSocketChannel", r"Selector", r"NIO"]),
    ("tasks, threads and dispatch (runtime)", [r"swift_job_run", r"swift_task", r"_dispatch", r"DispatchQueueActor", r"swift::", r"pthread"]),
]
KERNEL = [
    ("kernel: socket reads", [r"sys_read", r"sock_read", r"tcp_recvmsg", r"readv"]),
    ("kernel: socket writes", [r"tcp_sendmsg", r"sock_write", r"sys_writev", r"sys_sendmsg", r"sys_write\b", r"ksys_write"]),
    ("kernel: file I/O and fsync", [r"fsync", r"pwrite", r"pread", r"ext4", r"xfs", r"jbd2"]),
    ("kernel: epoll, futex and scheduling", [r"epoll", r"futex", r"schedule", r"eventfd"]),
]
compiled = [(n, [re.compile(p) for p in ps]) for n, ps in LINES]
kcompiled = [(n, [re.compile(p) for p in ps]) for n, ps in KERNEL]
counts = collections.Counter()
total = 0
def classify(frames):
    # frames: leaf first
    for sym in frames:
        for name, pats in compiled:
            if any(p.search(sym) for p in pats):
                return name
    for sym in frames:
        for name, pats in kcompiled:
            if any(p.search(sym) for p in pats):
                return name
    if any("[kernel" in f or f.startswith("k:") for f in frames):
        return "kernel: other"
    if re.search(r"malloc|_int_free|cfree|unlink_chunk|realloc|malloc_consolidate", frames[0]):
        return "allocation (malloc and free, caller unknown)"
    return "other (allocation, retain/release outside the lines above)"
frames = []

for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        if frames:
            counts[classify(frames)] += 1; total += 1
        frames = []
        continue
    if not line.startswith((" ", "\t")):
        frames = []
        continue
    parts = line.strip().split(" ", 1)
    sym = parts[1] if len(parts) > 1 else parts[0]
    if "libsqlite3" in sym: sym = "sqlite3 (libsqlite3, no symbols) " + sym
    frames.append(sym)
if frames:
    counts[classify(frames)] += 1; total += 1
cpu_us = float(sys.argv[1]) if len(sys.argv) > 1 else None
print(f"{'line':60} {'share':>7}" + ("   µs/msg" if cpu_us else ""))
for name, c in counts.most_common():
    share = c / total
    print(f"{name:60} {share*100:6.1f}%" + (f" {share*cpu_us:8.1f}" if cpu_us else ""))
print(f"samples: {total}")
