"""What the running PyTorch twin actually uses, for tools/bench_step_torch.py and
tools/bench_ops_torch.py: the BLAS library that PyTorch's GEMMs call, whether tcmalloc is loaded,
and (from the caller) the memory format. Read from inside the process, so a tuned run that did not
get its runtime says so instead of being called tuned.

- blas_library: the file that provides sgemm_ to libtorch_cpu (dlsym through libtorch_cpu's own
  handle, then dladdr, with symlinks such as Debian's /etc/alternatives resolved); when that
  lookup fails (e.g. a pip torch with MKL linked in), the first libblas* in /proc/self/maps.
- blas_threading: "openmp", "pthreads" or "sequential" from openblas_get_parallel() when that
  library is OpenBLAS, else null.
- blas_maps: every mapped file of /proc/self/maps whose name has "blas" or "lapack" in it.
- tcmalloc: the mapped libtcmalloc* file, or null (glibc malloc).

With tuned=True, shortfalls lists, one sentence each naming the Debian package and
tools/setup.sh --bench, what the tuned runtime lacks: tcmalloc not loaded, or a BLAS that is not
OpenMP OpenBLAS. The channels-last part is the caller's (it knows which models are CNNs)."""
import ctypes
import os


class _DlInfo(ctypes.Structure):
    _fields_ = [("dli_fname", ctypes.c_char_p), ("dli_fbase", ctypes.c_void_p),
                ("dli_sname", ctypes.c_char_p), ("dli_saddr", ctypes.c_void_p)]


def mapped_files():
    """The files mapped into this process, from /proc/self/maps (paths resolved by the kernel)."""
    files = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(None, 5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    path = parts[5].strip()
                    if path not in files:
                        files.append(path)
    except OSError:
        pass
    return files


def _sgemm_provider(files):
    """The library libtorch_cpu's sgemm_ resolves to, or None if it cannot be told."""
    torch_cpu = [p for p in files if os.path.basename(p).startswith("libtorch_cpu.so")]
    if not torch_cpu:
        return None
    try:
        addr = ctypes.cast(ctypes.CDLL(torch_cpu[0]).sgemm_, ctypes.c_void_p)
        info = _DlInfo()
        if ctypes.CDLL(None).dladdr(addr, ctypes.byref(info)) == 0 or not info.dli_fname:
            return None
        return os.path.realpath(info.dli_fname.decode())
    except (OSError, AttributeError):
        return None


def _openblas_threading(path):
    try:
        parallel = ctypes.CDLL(path).openblas_get_parallel()
    except (OSError, AttributeError):
        return None
    return {0: "sequential", 1: "pthreads", 2: "openmp"}.get(parallel, f"unknown ({parallel})")


def runtime(tuned, memory_format):
    """The runtime facts of this process as a dict for the twin's JSON (see the module's doc)."""
    files = mapped_files()
    blas_maps = [p for p in files if "blas" in os.path.basename(p) or "lapack" in os.path.basename(p)]
    blas = _sgemm_provider(files)
    if blas is None:
        blas = next((p for p in blas_maps if os.path.basename(p).startswith("libblas")), None)
    threading = _openblas_threading(blas) if blas else None
    tcmalloc = next((p for p in files if os.path.basename(p).startswith("libtcmalloc")), None)
    out = {"tuned": tuned, "memory_format": memory_format, "blas_library": blas,
           "blas_threading": threading, "blas_maps": blas_maps, "tcmalloc": tcmalloc,
           "shortfalls": []}
    if tuned:
        if tcmalloc is None:
            out["shortfalls"].append(
                "tcmalloc is not loaded (bench_step and bench_ops preload libtcmalloc_minimal.so.4 from the Debian "
                "package libtcmalloc-minimal4: tools/setup.sh --bench)")
        if threading != "openmp":
            out["shortfalls"].append(
                f"PyTorch's GEMMs call {blas or 'an unknown BLAS'} "
                f"({'OpenBLAS ' + threading if threading else 'not OpenBLAS'}) instead of the OpenMP "
                "OpenBLAS (bench_step and bench_ops put openblas-openmp/ of the Debian package "
                "libopenblas0-openmp first on LD_LIBRARY_PATH: tools/setup.sh --bench)")
    return out
