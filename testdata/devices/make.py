#!/usr/bin/env python3
"""Writes the synthetic two-card fixtures of testdata/devices (see
testdata/README.md, "devices/"). Run from the repository's root:

    python3 testdata/devices/make.py

Every file it writes is made up: the logs follow llama.cpp's format
strings (docs/formats.md), the fdinfo texts amdgpu's kernel 6.13+ layout
(Documentation/gpu/drm-usage-stats.rst and amdgpu_fdinfo.c: the DRM core's
header, pasid, drm_print_memory_stats per region cpu, gtt, vram, then the
legacy drm-memory-* keys in KiB, amd-* keys and engines).
"""
import os

ROOT = os.path.join("testdata", "devices")
MiB = 1 << 20
KiB = 1 << 10


def size(b):
    """The kernel's drm_fdinfo_print_size: the largest exact unit."""
    if b == 0 or b % KiB:
        return str(b)
    if b % MiB:
        return "%d KiB" % (b // KiB)
    return "%d MiB" % (b // MiB)


def amdgpu(client, pdev, pasid, gtt, vram, engine_ns):
    """One amdgpu client's fdinfo text (kernel 6.13+), sizes in bytes."""
    head = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t%d\n" % (1181 if pdev.startswith("0000:03") else 1190)
    t = head
    t += "drm-driver:\tamdgpu\ndrm-client-id:\t%d\ndrm-pdev:\t%s\npasid:\t%d\n" % (client, pdev, pasid)
    for region, v in (("cpu", 0), ("gtt", gtt), ("vram", vram)):
        t += "drm-total-%s:\t%s\n" % (region, size(v))
        t += "drm-shared-%s:\t%s\n" % (region, size(0 if region != "gtt" else min(v, 2 * MiB)))
        t += "drm-resident-%s:\t%s\n" % (region, size(v))
        t += "drm-purgeable-%s:\t0\n" % region
    t += "drm-memory-vram:\t%d KiB\n" % (vram // KiB)
    t += "drm-memory-gtt: \t%d KiB\n" % (gtt // KiB)
    t += "drm-memory-cpu: \t0 KiB\n"
    t += "amd-evicted-vram:\t0 KiB\n"
    t += "amd-requested-vram:\t%d KiB\n" % (vram // KiB)
    t += "amd-requested-gtt:\t%d KiB\n" % (gtt // KiB)
    if engine_ns:
        t += "drm-engine-gfx:\t0 ns\ndrm-engine-compute:\t%d ns\n" % engine_ns
    return t


TTY = "pos:\t0\nflags:\t0100002\nmnt_id:\t27\nino:\t6\n"
KFD = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1170\n"
DMABUF = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2231\nsize:\t67108864\ncount:\t1\nexp_name:\tamdgpu\n"

# The run: 12 ticks, 500 ms apart. Per card, client A (the KFD VM's
# drm_file, on two fds: libdrm duplicates it) holds the device's buffers,
# client B (a second open, mostly empty) 2 MiB of GTT.
TICKS = 12
CARD_LO, CARD_HI = "0000:03:00.0", "0000:83:00.0"
# MiB per tick (the final VRAM of the high card is not MiB-aligned).
HI_VRAM = [0, 1536, 3584, 5632, 7680, 9216, 9614, 10158, 10526, 10842, 10842, 10779.5]
HI_GTT = [18, 58, 64, 64, 64, 64, 64, 104, 104, 104, 104, 104]
LO_VRAM = [0, 0, 0, 1024, 3072, 5120, 7168, 8540, 9020, 9688, 9688, 9688]
LO_GTT = [18, 18, 22, 22, 22, 22, 22, 22, 22, 22, 22, 22]
B_GTT = [0] + [2] * (TICKS - 1)


def tick_fds(i, hi_vram):
    """The fds of the process at tick i: fd -> (link, text)."""
    lo_a = amdgpu(1907, CARD_LO, 32801, int(LO_GTT[i] * MiB), int(LO_VRAM[i] * MiB), 1000000 * i)
    lo_b = amdgpu(1911, CARD_LO, 32803, B_GTT[i] * MiB, 0, 0)
    hi_a = amdgpu(1909, CARD_HI, 32802, int(HI_GTT[i] * MiB), int(hi_vram[i] * MiB), 1300000 * i)
    hi_b = amdgpu(1913, CARD_HI, 32804, B_GTT[i] * MiB, 0, 0)
    return [
        (0, "/dev/pts/3", TTY), (1, "/dev/pts/3", TTY), (2, "/dev/pts/3", TTY),
        (3, "/dev/kfd", KFD),
        (4, "/dev/dri/renderD128", lo_a), (5, "/dev/dri/renderD128", lo_a), (6, "/dev/dri/renderD128", lo_b),
        (7, "/dev/dri/renderD129", hi_a), (8, "/dev/dri/renderD129", hi_a), (9, "/dev/dri/renderD129", hi_b),
        (10, "/dmabuf:", DMABUF),
    ]


def samples(path, hi_vram):
    with open(path, "w") as f:
        for i in range(TICKS):
            ns = 104815377 + i * 500731119
            t = "2026-11-12T09:14:%02d.%09dZ" % (3 + ns // 1000000000, ns % 1000000000)
            f.write("# sample t=%s pid=73114\n" % t)
            for fd, _, text in tick_fds(i, hi_vram):
                f.write("## fd=%d\n%s" % (fd, text))


def snapshot(path, i):
    os.makedirs(path, exist_ok=True)
    for fd, _, text in tick_fds(i, HI_VRAM):
        with open(os.path.join(path, str(fd)), "w") as f:
            f.write(text)


def log(path, build, devices, rows):
    """A llama-server log of one load on two ROCm devices. devices: (name,
    pci or None, free MiB); rows: per device (model, kv, compute)."""
    L = []
    L.append("ggml_cuda_init: found 2 ROCm devices:")
    L.append("  Device 0: AMD Radeon RX 7900 XTX, gfx1100 (0x1100), VMM: no, Wave Size: 32")
    L.append("  Device 1: AMD Radeon RX 7900 XTX, gfx1100 (0x1100), VMM: no, Wave Size: 32")
    L.append("build: %d (%s) with cc (GCC) 14.2.1 20250207 for x86_64-pc-linux-gnu" % build)
    L.append("system info: n_threads = 16, n_threads_batch = 16, total_threads = 32")
    L.append("main: HTTP server is listening, hostname: 127.0.0.1, port: 8080, http threads: 31")
    L.append("main: loading model")
    L.append("srv    load_model: loading model '/models/Qwen2.5-32B-Instruct-Q4_K_M.gguf'")
    fn = "llama_model_load_from_file_impl"
    for name, pci, free in devices:
        if pci:
            L.append("%s: using device %s (AMD Radeon RX 7900 XTX) (%s) - %d MiB free" % (fn, name, pci, free))
        else:
            L.append("%s: using device %s (AMD Radeon RX 7900 XTX) - %d MiB free" % (fn, name, free))
    L.append("llama_model_loader: loaded meta data with 35 key-value pairs and 771 tensors from /models/Qwen2.5-32B-Instruct-Q4_K_M.gguf (version GGUF V3 (latest))")
    L.append("llama_model_loader: - kv   0:                       general.architecture str              = qwen2")
    L.append("llama_model_loader: - type  f32:  321 tensors")
    L.append("llama_model_loader: - type q4_K:  385 tensors")
    L.append("llama_model_loader: - type q6_K:   65 tensors")
    L.append("print_info: file format = GGUF V3 (latest)")
    L.append("print_info: file size   = 18.48 GiB (4.85 BPW) ")
    L.append("load_tensors: loading model tensors, this can take a while... (mmap = true)")
    for il in range(64):
        L.append("load_tensors: layer %3d assigned to device %s, is_swa = 0" % (il, devices[0][0] if il < 34 else devices[1][0]))
    L.append("load_tensors: layer  64 assigned to device %s, is_swa = 0" % devices[1][0])
    L.append("load_tensors: offloading 64 repeating layers to GPU")
    L.append("load_tensors: offloading output layer to GPU")
    L.append("load_tensors: offloaded 65/65 layers to GPU")
    L.append("load_tensors:   CPU_Mapped model buffer size =   417.66 MiB")
    for (name, _, _), (model, _, _) in zip(devices, rows):
        L.append("load_tensors: %12s model buffer size = %8.2f MiB" % (name, model))
    L.append("." * 91)
    L.append("llama_context: constructing llama_context")
    L.append("llama_context: n_seq_max     = 1")
    L.append("llama_context: n_ctx         = 4096")
    L.append("llama_context: n_ctx_per_seq = 4096")
    L.append("llama_context: n_batch       = 2048")
    L.append("llama_context: n_ubatch      = 512")
    L.append("llama_context: flash_attn    = 0")
    L.append("llama_context:  ROCm_Host  output buffer size =     0.58 MiB")
    for (name, _, _), (_, kv, _) in zip(devices, rows):
        L.append("llama_kv_cache: %10s KV buffer size = %8.2f MiB" % (name, kv))
    L.append("llama_kv_cache: size = 1024.00 MiB (  4096 cells,  64 layers,  1/1 seqs), K (f16):  512.00 MiB, V (f16):  512.00 MiB")
    L.append("llama_context: pipeline parallelism enabled (n_copies=4)")
    for (name, _, _), (_, _, comp) in zip(devices, rows):
        L.append("llama_context: %10s compute buffer size = %8.2f MiB" % (name, comp))
    L.append("llama_context:  ROCm_Host compute buffer size =    40.02 MiB")
    L.append("llama_context: graph nodes  = 2246")
    L.append("llama_context: graph splits = 3")
    L.append("common_init_from_params: warming up the model with an empty run - please wait ... (--no-warmup to disable)")
    L.append("srv          init: initializing slots, n_slots = 1")
    L.append("main: model loaded")
    L.append("main: server is listening on http://127.0.0.1:8080 - starting the main loop")
    L.append("srv  update_slots: all slots are idle")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


ROCM0 = (9613.47, 544.00, 368.01)
ROCM1 = (8540.25, 480.00, 412.52)

# HIP_VISIBLE_DEVICES=1,0: ROCm0 is the card at 0000:83:00.0, the higher
# address, and the log (b6451+) says so.
d = os.path.join(ROOT, "2xrocm-pci")
os.makedirs(d, exist_ok=True)
log(os.path.join(d, "split.log"), (6550, "7a5e1b2c4"),
    [("ROCm0", CARD_HI, 24522), ("ROCm1", CARD_LO, 24524)], [ROCM0, ROCM1])
samples(os.path.join(d, "gtt.txt"), HI_VRAM)
# The same run where the card of ROCm0 held less VRAM than its buffers.
samples(os.path.join(d, "gtt-over.txt"), [min(v, 10400) for v in HI_VRAM])

# An older build (b6300: no PCI address before b6451) in the default order: ROCm0 is the
# card at the lower address, 0000:03:00.0, and holds the smaller share.
d = os.path.join(ROOT, "2xrocm-order")
os.makedirs(d, exist_ok=True)
log(os.path.join(d, "split.log"), (6300, "3c9d0e8a1"),
    [("ROCm0", None, 24524), ("ROCm1", None, 24522)], [ROCM1, ROCM0])
samples(os.path.join(d, "gtt.txt"), HI_VRAM)

# One `cp -r /proc/PID/fdinfo` snapshot of the two-card process at its
# VRAM peak (tick 9).
snapshot(os.path.join("testdata", "fdinfo", "2xrocm-peak"), 9)
