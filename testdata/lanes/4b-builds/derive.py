# Derives testdata/lanes/4b-builds: the 4B lane (strix01 gpu0, the 4B
# command) measured at five llama.cpp builds, from the recorded 4B run
# (testdata/runs/4b/events.jsonl). No measurement: each run is the
# reference run rewritten. Run from the repository root:
#
#   python3 testdata/lanes/4b-builds/derive.py testdata/runs/4b/events.jsonl testdata/lanes/4b-builds
#
# What each build changes (the answer key is in testdata/README.md):
#   b9850  the reference run as it is (packed copy 795.8 MiB)
#   b9866  the peak +60 MiB and the last compute buffer +0.5 MiB: under
#          every row's threshold
#   b9901  no packed copy: the host-weight trace packs nothing (its pack
#          and evict lines emptied, the summary packed=0 resident=0.0 MiB)
#          and every GTT figure of the samples is the packed copy smaller
#          (never below the runtime's 260 MiB)
#   b9920  as b9901
#   b9950  the packed copy back: the reference run again
# Every run has its own id, start (a day apart), build line, source
# commit and commit time.
import json, os, re, sys

src, dst = sys.argv[1], sys.argv[2]
OLD_ID = "strix01-20261107T140311-4b"
OLD_BUILD = "build 9866 (40f58efe1)"
OLD_COMMIT = "40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f"
BASE = 266240      # KiB: the runtime's GTT before the model load
PACKED = 814899    # KiB: the packed copy (795.8 MiB) to the KiB below
NOISE = 60 * 1024  # KiB: b9866's larger peak

BUILDS = [
    # name, day, commit, commit time, packed copy, noise
    ("b9850", 3, "9a1c0e5f2b7d4e6a8c0b1d3f5e7a9c1b3d5f7e9a", "2026-11-02T17:20:44Z", True, False),
    ("b9866", 4, "40f58efe1a8f4c3e9d2b7a6c5e4f3a2b1c0d9e8f", "2026-11-03T09:12:05Z", True, True),
    ("b9901", 5, "c3e5a7b9d1f3e5a7c9b1d3f5a7c9e1b3d5f7a9c1", "2026-11-04T21:48:30Z", False, False),
    ("b9920", 6, "e7f9a1b3c5d7e9f1a3b5c7d9e1f3a5b7c9d1e3f5", "2026-11-05T08:03:17Z", False, False),
    ("b9950", 7, "5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b3d", "2026-11-06T14:31:52Z", True, False),
]

gttre = re.compile(r"^(drm-(?:total|memory|resident|shared)-gtt:\s*)(\d+)(?: (KiB|MiB|GiB))?$", re.M)
tracere = re.compile(r"hrx: host-weight (?:pack|evict) .*$")
summaryre = re.compile(r"hrx: host-weight summary packed=\d+ resident=[0-9.]+ MiB")


def kib(v, unit):
    v = int(v)
    return {"": v // 1024, "KiB": v, "MiB": v * 1024, "GiB": v * 1024 * 1024}[unit]


def gtt(text, big, what):
    """Changes every GTT figure of an fdinfo text above the runtime's base
    by what(kib); big[0] is (the largest drm-total-gtt, its change)."""
    def rep(m):
        k = kib(m.group(2), m.group(3) or "")
        if k <= BASE:
            return m.group(0)
        n = what(k)
        if m.group(1).startswith("drm-total-gtt") and k > big[0][0]:
            big[0] = (k, n - k)
        return f"{m.group(1)}{n} KiB"
    return gttre.sub(rep, text)


def logline(text, packed, noise):
    if not packed:
        text = tracere.sub("", text)
        text = summaryre.sub("hrx: host-weight summary packed=0 resident=0.0 MiB", text)
    if noise:
        text = text.replace("HRX0 compute buffer size =    43.21 MiB", "HRX0 compute buffer size =    43.71 MiB")
        text = text.replace("HRX0 compute buffer size is  43.2100 MiB, matches expectation of  43.2100 MiB",
                            "HRX0 compute buffer size is  43.7100 MiB, matches expectation of  43.7100 MiB")
    return text


def derive(name, day, commit, ctime, packed, noise):
    new_id = f"strix01-202611{day:02d}T100311-4b-{name}"
    if packed and not noise:
        what = lambda k: k
    elif noise:
        what = lambda k: k + NOISE
    else:
        what = lambda k: max(k - PACKED, BASE)
    out = []
    for line in open(src, encoding="utf-8"):
        e = json.loads(line)
        d = e["data"]
        if e["type"] == "io.gttsplit.run.started.v1":
            d["source_commit"] = commit
            items = list(d.items())
            i = [k for k, _ in items].index("source_dirty")
            items.insert(i + 1, ("source_commit_time", ctime))
            e["data"] = dict(items)
        elif e["type"] == "io.gttsplit.log.lines.v1":
            for l in d["lines"]:
                l["text"] = logline(l["text"], packed, noise).replace(OLD_BUILD, f"build {name[1:]} ({commit[:9]})")
        elif e["type"] == "io.gttsplit.fdinfo.sample.v1":
            # The card's used bytes move by what its biggest client's
            # drm-total-gtt moved.
            big = [(0, 0)]
            for p in d["procs"]:
                for fd in p["fds"]:
                    fd["text"] = gtt(fd["text"], big, what)
            for c in d.get("cards") or []:
                c["gtt_used_bytes"] += big[0][1] * 1024
        s = json.dumps(e, ensure_ascii=False, separators=(",", ":"))
        s = s.replace(OLD_ID, new_id).replace("2026-11-07T14:03:", f"2026-11-{day:02d}T10:03:")
        out.append(s + "\n")
    os.makedirs(f"{dst}/{name}", exist_ok=True)
    with open(f"{dst}/{name}/events.jsonl", "w", encoding="utf-8") as f:
        f.writelines(out)


for b in BUILDS:
    derive(*b)
