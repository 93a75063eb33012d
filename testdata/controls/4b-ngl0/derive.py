# Derives testdata/controls/4b-ngl0 (the offload-off control of the 4B run) from testdata/runs/4b.
# Run from the repository root: python3 testdata/controls/4b-ngl0/derive.py testdata/runs/4b testdata/controls/4b-ngl0
import json, re, sys, os
src, dst = sys.argv[1], sys.argv[2]
OLD_ID, NEW_ID = "strix01-20261107T140311-4b", "strix01-20261107T141509-4b-ngl0"
BASE = 266240  # KiB: 260 MiB, the runtime's GTT before the model load
PEAK = 3923 * 1024
K = (769331 - BASE) / (PEAK - BASE)  # the peak client becomes 769331 KiB (751.30 MiB)

def kib(v, unit):
    v = int(v)
    return {"": v // 1024, "KiB": v, "MiB": v * 1024, "GiB": v * 1024 * 1024}[unit]

def scale(k):
    if k <= BASE:
        return k
    return BASE + round((k - BASE) * K)

gttre = re.compile(r"^(drm-(?:total|memory|resident|shared)-gtt:\s*)(\d+)(?: (KiB|MiB|GiB))?$", re.M)
def fdtext(t, delta):
    def rep(m):
        k = kib(m.group(2), m.group(3) or "")
        n = scale(k)
        if n == k:
            return m.group(0)
        if m.group(1).startswith("drm-total-gtt"):
            delta[0] += (k - n) * 1024
        return f"{m.group(1)}{n} KiB"
    return gttre.sub(rep, t)

def logline(t):
    t = re.sub(r"(\S+) model buffer size = +(\d+\.\d+) MiB", lambda m: {
        "CPU_Mapped": "CPU_Mapped model buffer size =  2680.19 MiB",
        "HRX0": "offloading 0 repeating layers to GPU",
        "HRX0_Split": "offloaded 0/33 layers to GPU"}[m.group(1)] if float(m.group(2)) > 0 else m.group(0), t)
    t = re.sub(r"HRX0 (KV|RS) buffer size = +(\d+\.\d+)", lambda m: m.group(0).replace("HRX0", " CPU") if float(m.group(2)) > 0 else m.group(0), t)
    t = re.sub(r"hrx: host-weight .*$", "", t)
    t = t.replace("(2455 =  2375 +      36 +      43) +        4837", "(  43 =     0 +       0 +      43) +        4837").replace("98304 = 91012", "98304 = 93424")
    t = t.replace("311 =   304 +       0 +       7", "2723 =  2680 +      36 +       7")
    return t

def times(s):
    return s.replace("T14:03:", "T14:15:").replace(OLD_ID, NEW_ID).replace("-ngl 99", "-ngl 0")

os.makedirs(dst, exist_ok=True)
with open(f"{src}/split.log", "rb") as f:
    lines = f.read().decode().split("\n")
with open(f"{dst}/split.log", "w") as f:
    f.write("\n".join(logline(l) for l in lines))
# gtt.txt: the card's used bytes drop by what the big client's drm-total-gtt dropped
text = open(f"{src}/gtt.txt").read()
blocks = [b for b in re.split(r"(?m)^(?=# sample )", text) if b]
tre = re.compile(r"^drm-total-gtt:\s*(\d+)(?: (KiB|MiB|GiB))?$", re.M)
big = {}
for b in blocks:
    t = re.match(r"# sample t=(\S+)", b).group(1)
    for m in tre.finditer(b):
        big[t] = max(big.get(t, 0), kib(m.group(1), m.group(2) or ""))
outtext = ""
for b in blocks:
    t = re.match(r"# sample t=(\S+)", b).group(1)
    nb = fdtext(b, [0])
    m = re.search(r"mem_info_gtt_used=(\d+)", nb)
    if m:
        dd = (big[t] - scale(big[t])) * 1024
        nb = nb.replace(m.group(0), f"mem_info_gtt_used={int(m.group(1)) - dd}")
    outtext += times(nb)
open(f"{dst}/gtt.txt", "w").write(outtext)
# events.jsonl: the same transformation on each event; the run-started event names the run it is the control of
big_ev = {}
evs = [json.loads(l) for l in open(f"{src}/events.jsonl")]
with open(f"{dst}/events.jsonl", "w") as f:
    for e in evs:
        d = e["data"]
        if e["type"] == "io.gttsplit.run.started.v1":
            d["command"] = d["command"].replace("-ngl 99", "-ngl 0")
            d["args"] = ["0" if (a == "99" and d["args"][i-1] == "-ngl") else a for i, a in enumerate(d["args"])]
            items = list(d.items())
            i = [k for k, _ in items].index("issue")
            items.insert(i + 1, ("control_of", "@@CONTROL@@"))
            e["data"] = d = dict(items)
        elif e["type"] == "io.gttsplit.log.lines.v1":
            for l in d["lines"]:
                l["text"] = logline(l["text"])
        elif e["type"] == "io.gttsplit.fdinfo.sample.v1":
            mx = 0
            for p in d["procs"]:
                for fd in p["fds"]:
                    for m in tre.finditer(fd["text"]):
                        mx = max(mx, kib(m.group(1), m.group(2) or ""))
                    fd["text"] = fdtext(fd["text"], [0])
            for c in d.get("cards") or []:
                c["gtt_used_bytes"] -= (mx - scale(mx)) * 1024
        f.write(times(json.dumps(e, ensure_ascii=False, separators=(",", ":"))).replace("@@CONTROL@@", OLD_ID) + "\n")
