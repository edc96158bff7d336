"""vLLM's own files in three releases: 0.22.1 (the lesson's), 0.24.0 (PR #43081 merged), 0.33.0 (today's).

0.22.1's are read from the installed vllm. The later ones are read from their wheels, by member name, never installed:
`wheel(version)` runs `pip download vllm==X --no-deps --only-binary=:all:` once (about 300 MB each) into
artifacts/upstream/ (git-ignored; DFLASH_FI_UPSTREAM_CACHE names another folder). Every file is checked against its
sha256 below, as step 0's flashinfer.py is, so a different file fails loudly instead of teaching something else.

    source(version, path), definition(version, path, qualname)   a pinned file, and one definition in it
    CLAIMS, claim(key)   every claim the course makes about upstream: what this project does, what upstream's code
                         does, the PRs, and since which pinned release, each shown by probes of the releases' code

Only the three pinned releases are read: "in 0.33.0, not in 0.24.0" is all the code can show about a change, never
which release in between first had it. Nothing here runs at import.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dflash_fi.errors import PatchError, UpstreamUnavailable
from dflash_fi.stack import REPO_ROOT

LESSON, MERGED, TODAY = "0.22.1", "0.24.0", "0.33.0"
VERSIONS = (LESSON, MERGED, TODAY)
FLASHINFER = "vllm/v1/attention/backends/flashinfer.py"
CUDA = "vllm/platforms/cuda.py"
SELECTOR = "vllm/v1/attention/selector.py"
PROPOSER = "vllm/v1/spec_decode/llm_base_proposer.py"
SHA256 = {
    (LESSON, FLASHINFER): "05f7c09a0c28fd0b2ece6430fb2bd46643be62763ee539df2653364431d66dbd",
    (LESSON, CUDA): "911f5b3c66f4c6e173370d30a81af494f273b90e6832e4c6d1747e625c7f89e3",
    (LESSON, SELECTOR): "1a1249b4bfb7f114d9a6964bef0aa175f2f73caad514da6720a3becc26169809",
    (LESSON, PROPOSER): "31c4ac72f9615aa4e2d1932ce57ca0d07da8728ac65034e4fe72bffa85c4a1ae",
    (MERGED, FLASHINFER): "ce9071eade3d1a9c7dc9dd9f187212599e1c20058ffda901d6950b9dcde19913",
    (MERGED, CUDA): "d89827b5a063d81cb57f3c7255155e8a3fda111e537409a5c830de4b56a76b1b",
    (MERGED, SELECTOR): "4c555b51d39cc8bb9a2f0788d58d87810678970019a85bc8275844f4d7f1a761",
    (MERGED, PROPOSER): "9598b59bbb38ade0341685e8bfc2ff4d64d9f42c2cd0f3d1adec6eaefade6bb6",
    (TODAY, FLASHINFER): "5dbc8ee6bf006a1aedcc55a70877d008554e24344e50d6d9941550ad1ae67425",
    (TODAY, CUDA): "0cfa80cce99aae194689d822edef808e5c78454eec696fb1c2ded7d17dfe71bb",
    (TODAY, SELECTOR): "41ebb10143427827668a101a434fd59431960087ad9626dd76f69676990d2fb8",
    (TODAY, PROPOSER): "6e0420cc3910414a34aaebdc7c029b5befb4b7609c40df044d37bf8a68d3429d",
}
CACHE_ENV = "DFLASH_FI_UPSTREAM_CACHE"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or REPO_ROOT / "artifacts" / "upstream")


def download_command(version: str, into: Path) -> list[str]:
    # Few retries, short timeout: without PyPI this fails in seconds, not minutes.
    return [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--only-binary=:all:",
            "--retries", "1", "--timeout", "30", "--disable-pip-version-check", "-q", "-d", str(into)]


def _cached_wheel(version: str, folder: Path) -> Path | None:
    return next(iter(sorted(folder.glob(f"vllm-{version}-*.whl"))), None)


def wheel(version: str) -> Path:
    """vLLM `version`'s wheel in the cache, fetched from PyPI the first time."""
    if version not in VERSIONS[1:]:
        raise UpstreamUnavailable(f"no pinned vLLM wheel {version!r}: the lesson reads {', '.join(VERSIONS[1:])}")
    folder = cache_dir()
    if (found := _cached_wheel(version, folder)) is not None:
        return found
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".vllm-download-") as partial:  # no half a wheel left
        command = download_command(version, Path(partial))
        try:
            done = subprocess.run(command, capture_output=True, text=True)
            failed = done.returncode != 0 and ((done.stderr or done.stdout).strip().splitlines() or ["no output"])[-1]
        except OSError as exc:
            failed = str(exc)
        if not failed and (downloaded := _cached_wheel(version, Path(partial))) is not None:
            folder.mkdir(exist_ok=True)
            found = folder / downloaded.name
            os.replace(downloaded, found)
    if failed or found is None:
        raise UpstreamUnavailable(
            f"vLLM {version}'s wheel could not be fetched from PyPI ({failed or 'no wheel written'}); "
            f"where PyPI is reachable run: pip download vllm=={version} --no-deps --only-binary=:all: -d {folder}")
    return found


def installed_file(path: str) -> Path:
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise PatchError("vllm is not importable: install vllm==0.22.1 (see README).")
    return Path(spec.submodule_search_locations[0]).parent / path


def source(version: str, path: str) -> str:
    """The text of `path` (e.g. FLASHINFER) in vLLM `version`, checked against its pinned sha256."""
    if (version, path) not in SHA256:
        raise UpstreamUnavailable(f"{path} of vLLM {version} is not one of the files the lesson pins")
    if version == LESSON:
        data, where = installed_file(path).read_bytes(), str(installed_file(path))
    else:
        archive = wheel(version)
        try:
            with zipfile.ZipFile(archive) as zf:
                data = zf.read(path)
        except (zipfile.BadZipFile, KeyError) as exc:
            raise PatchError(f"{archive} is damaged or lacks {path} ({exc}): delete it to fetch it again") from exc
        where = f"{archive.name}:{path}"
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[version, path]:
        raise PatchError(f"{where} is not vLLM {version}'s {path} (sha256 {digest[:12]}..., pinned "
                         f"{SHA256[version, path][:12]}...): delete it to fetch it again")
    return data.decode("utf-8")


def check_all() -> list[str]:
    """Every pinned file read (the wheels fetched first where they are missing) and checked, then one line each."""
    for version, path in sorted(SHA256):  # all before anything is said
        source(version, path)
    return [*(f"vllm {v} {p}: sha256 {SHA256[v, p][:12]}... as pinned" for v, p in sorted(SHA256)),
            f"wheels in {cache_dir()}"]


def _node(tree: ast.AST, qualname: str):
    node = tree
    for name in qualname.split("."):
        node = next((n for n in getattr(node, "body", []) if getattr(n, "name", None) == name), None)
        if node is None:
            return None
    return node


def definition(version: str, path: str, qualname: str) -> str | None:
    """The source of `qualname` (e.g. 'FlashInferBackend.supports_non_causal') in `path` of vLLM `version`, its
    decorators included and dedented; None where that release has no such definition."""
    text = source(version, path)
    node = _node(ast.parse(text), qualname)
    if node is None:
        return None
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return textwrap.dedent("\n".join(text.splitlines()[first - 1:node.end_lineno])) + "\n"


@dataclass(frozen=True)
class Probe:
    """`pattern` (a regex) occurs in the definition `qualname` of `path`, or, with absent=True, does not."""

    path: str
    qualname: str
    pattern: str
    absent: bool = False

    def holds(self, version: str) -> bool:
        text = definition(version, self.path, self.qualname)
        found = text is not None and re.search(self.pattern, text) is not None
        return found != self.absent


class Agreement(enum.Enum):
    SAME = "upstream does the same"
    OTHERWISE = "upstream does it another way"
    NOT_DONE = "upstream has not done it"


@dataclass(frozen=True)
class Claim:
    """What this project does at `step`, what upstream's code does at the same place (`theirs`, shown in a release's
    code by all `probes`), the PRs whose threads say why, and the first pinned release that shows `theirs`."""

    key: str
    step: int
    ours: str
    theirs: str
    agreement: Agreement
    prs: tuple[str, ...]  # empty: no public thread found
    probes: tuple[Probe, ...]
    since: str | None  # LESSON, MERGED, TODAY or None (not in TODAY); tests hold it to `shown_since()`

    def shown_since(self) -> str | None:
        """The first pinned release whose code shows `theirs`, every later one too, from the probes."""
        holds = [all(p.holds(v) for p in self.probes) for v in VERSIONS]
        return next((v for i, v in enumerate(VERSIONS) if all(holds[i:])), None)

    def when(self) -> str:
        """`since` as the code can say it: a change first seen in TODAY is 'in 0.33.0, not in 0.24.0'."""
        return {LESSON: f"already in {LESSON}", MERGED: f"since {MERGED}", None: f"not in {TODAY}",
                TODAY: f"in {TODAY}, not in {MERGED}"}[self.since]


_BUILD, _WRAPPER = "FlashInferMetadataBuilder.build", "FlashInferMetadataBuilder._get_prefill_wrapper"
_CLAIM = "FlashInferMetadataBuilder.get_cudagraph_support"
_S, _O, _N = Agreement.SAME, Agreement.OTHERWISE, Agreement.NOT_DONE
CLAIMS = (
    Claim("supports_non_causal", 1, "FlashInfer says it can serve a non-causal layer", "the same flag", _S,
          ("#43081",), (Probe(FLASHINFER, "FlashInferBackend.supports_non_causal", r"return True"),), MERGED),
    Claim("causal_metadata", 2, "metadata.causal; a non-causal batch is all prefill", "the same", _S, ("#43081",),
          (Probe(FLASHINFER, "FlashInferMetadata", r"causal: bool"),
           Probe(FLASHINFER, _BUILD, r"num_prefills = num_reqs")), MERGED),
    Claim("noncausal_wrapper", 3, "a separate non-causal wrapper; DCP and NVFP4 refused first thing in build()",
          "the same wrapper; DCP refused in build(), NVFP4 only when the wrapper is asked for", _O, ("#43081",),
          (Probe(FLASHINFER, _WRAPPER, r"_noncausal_prefill_wrapper = "),
           Probe(FLASHINFER, _WRAPPER, r"if self\.is_kvcache_nvfp4:\s+raise NotImplementedError")), MERGED),
    Claim("no_trtllm", 4, "no TRTLLM for a non-causal batch, one warning", "the same", _S, ("#43081",),
          (Probe(FLASHINFER, _BUILD, r"prefill_use_trtllm = causal and"),
           Probe(FLASHINFER, _BUILD, r"if not causal and self\.use_trtllm_decode_attention:")), MERGED),
    Claim("noncausal_graph_claim", 5, "no UNIFORM_BATCH claim for a non-causal config (taken from #48167)",
          "the same off SM 9.0 / 12.x; there UNIFORM_BATCH, the draft on XQA", _O, ("#48167", "#50439"),
          (Probe(FLASHINFER, _CLAIM, r"not use_non_causal or is_xqa_arch"),), TODAY),
    Claim("flash_attn_first", 5, "0.22.1's priority lists: FlashInfer where they put it",
          "FLASH_ATTN first for a non-causal layer on SM 10.x", _O, ("#48167",),
          (Probe(CUDA, "_get_backend_priorities", r"use_non_causal"),), TODAY),
    Claim("fa2_draft_kernel", 5, "the non-causal wrapper runs FlashInfer's fa2 kernel (faster for 16-query blocks)",
          "backend='auto' (fa3 on SM 9.0)", _N, (),
          (Probe(FLASHINFER, _WRAPPER, r'backend="auto"'), Probe(FLASHINFER, _WRAPPER, r'"fa2"', absent=True)),
          MERGED),
    Claim("graph_prefill_wrappers", 6, "CUDA-graph prefill wrappers: UNIFORM_BATCH for causal spec decoding "
          "without TRTLLM", "no prefill wrapper built for graphs; below SM 9.0 UNIFORM_BATCH from FlashInfer's fa2 "
          "decode of uniform spec queries, on SM 9.0 / 12.x from XQA", _O, ("#50439", "#49718"),
          (Probe(FLASHINFER, _WRAPPER, r"use_cuda_graph", absent=True),
           Probe(FLASHINFER, _CLAIM, r"_use_fa2_native_decode\(\)")), TODAY),
    Claim("drafter_piecewise", 6, "the drafter captures PIECEWISE graphs only (vLLM's, kept)",
          "still PIECEWISE only (#48167 names full draft graphs as a follow-up)", _S, ("#48167",),
          (Probe(PROPOSER, "SpecDecodeBaseProposer.initialize_cudagraph_keys",
                 r"eagle_cudagraph_mode = CUDAGraphMode\.PIECEWISE"),), LESSON),
    Claim("host_bounds", 7, "a draft plans from host bounds: no wait on the lazy seq_lens_cpu copy",
          "the bound only without speculative tokens; else seq_lens is copied from the GPU", _N, ("#57352 (open)",),
          (Probe(FLASHINFER, _BUILD, r"_num_speculative_tokens == 0\s+and common_attn_metadata\.seq_lens_cpu_upper"),
           Probe(FLASHINFER, _BUILD, r"seq_lens\.cpu\(\)")), TODAY),
    Claim("plan_once", 8, "a draft's plan kept while its shape holds",
          "every non-causal prefill build plans (on SM 9.0 / 12.x a draft goes to XQA instead)", _N, (),
          (Probe(FLASHINFER, _BUILD, r"causal=attn_metadata\.causal"),), MERGED),
    Claim("xqa_draft", 9, "the draft on XQA (a packed block mask, no plan()) on SM 9.0 where it is the faster kernel",
          "every draft on XQA on SM 9.0 and 12.x", _O, ("#50439", "#49718"),
          (Probe(FLASHINFER, _BUILD, r"route_decode = causal or self\.use_xqa"),
           Probe(FLASHINFER, "_make_xqa_draft_block_mask", r"if causal else")), TODAY),
)


def claim(key: str) -> Claim:
    """The claim named `key` (a `Claim.key`)."""
    found = next((c for c in CLAIMS if c.key == key), None)
    if found is None:
        raise KeyError(f"no upstream claim {key!r}: one of {', '.join(c.key for c in CLAIMS)}")
    return found
