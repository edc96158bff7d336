"""Step 8 on the real FlashInferMetadataBuilder (FlashInfer's wrappers are doubles that count plan(); step 8's
page-table kernel runs from its own source under Triton's CPU interpreter): a draft plan made once and kept until a
request joins (requests that leave keep their rows, empty), the exact page table written by one kernel launch,
everything else routed as at step 7."""

import inspect
from itertools import accumulate

import pytest
import torch

from dflash_fi.lab.batches import STANDARD_BATCHES, Batch, common_metadata
from dflash_fi.lab.gpu_doubles import TritonInterpreted, triton_source
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers
from dflash_fi.lab.routing import RoutingLab, routing_report
from dflash_fi.steps import backend_module
from dflash_fi.vocabulary import BLACKWELL, DRAFT_BLOCK_SIZE, HOPPER, KV_PAGE_SIZE

pytestmark = pytest.mark.step8
Q = DRAFT_BLOCK_SIZE
CONTEXTS, SLACK = (37, 90, 150, 304), (3, 15, 0, 9)  # bounds above the exact lengths; 304 + 16 fills its pages


def draft(n=4, grown=0, query_lens=None, contexts=CONTEXTS):
    """A DFlash draft batch of n requests whose contexts grew by `grown` tokens; bounds above the exact lengths."""
    return Batch("draft", query_lens or (Q,) * n, tuple(c + grown for c in contexts[:n]), False, SLACK[:n])


def exact_page_table(cad) -> dict:
    """FlashInfer's paged_kv_indptr / last_page_len / indices of the exact lengths, computed here independently."""
    lens = cad.seq_lens.tolist()
    pages = [-(-n // KV_PAGE_SIZE) for n in lens]
    return {"indptr": [0, *accumulate(pages)], "last_page_len": [(n - 1) % KV_PAGE_SIZE + 1 if n else 0 for n in lens],
            "indices": [int(p) for r, n in enumerate(pages) for p in cad.block_table_tensor[r, :n]]}


def written_page_table(builder, num_reqs: int) -> dict:
    indptr = builder.paged_kv_indptr.gpu[: num_reqs + 1].tolist()
    return {"indptr": indptr, "last_page_len": builder.paged_kv_last_page_len.gpu[:num_reqs].tolist(),
            "indices": builder.paged_kv_indices.gpu[: indptr[-1]].tolist()}


def build(lab, batch, cad=None):
    from vllm.config import set_current_vllm_config

    builder, _, config = lab.builders[batch.role]
    cad = common_metadata(batch) if cad is None else cad
    with set_current_vllm_config(config):
        return builder.build(0, cad), cad


def plans(lab) -> int:
    wrapper = lab.builders["draft"][0]._noncausal_prefill_wrapper
    return len(wrapper.plans) if wrapper is not None else 0


def test_draft_steps_of_one_shape_plan_once_and_the_kernel_reads_the_exact_page_table():
    with RoutingLab(8) as lab:
        builder = lab.builders["draft"][0]
        first, _ = build(lab, draft())
        for step in range(1, 6):  # contexts grow by one block per step, past page boundaries
            md, cad = build(lab, draft(grown=Q * step))
            wrapper = md.prefill.wrapper
            assert plans(lab) == 1, f"draft step {step} planned again"
            assert cad._seq_lens_cpu is None  # nothing was copied from the GPU
            assert written_page_table(builder, cad.num_reqs) == exact_page_table(cad), step
            # run() reads the builder's buffers, which this build rewrote
            assert wrapper is builder._noncausal_prefill_wrapper
            assert wrapper._paged_kv_indptr_buf.data_ptr() == builder.paged_kv_indptr.gpu.data_ptr()
            assert wrapper._paged_kv_indptr_buf.numel() == cad.num_reqs + 1
            assert wrapper._paged_kv_last_page_len_buf.data_ptr() == builder.paged_kv_last_page_len.gpu.data_ptr()
            assert wrapper._paged_kv_indices_buf is builder.paged_kv_indices.gpu
            assert md.slot_mapping is cad.slot_mapping
            assert {k: v for k, v in vars(md).items() if k != "slot_mapping"} == {
                k: v for k, v in vars(first).items() if k != "slot_mapping"}  # what forward() reads, as planned


def test_each_build_writes_the_page_table_in_one_launch_from_the_gpu_lengths():
    with RoutingLab(8) as lab:
        kernel = lab.module._fill_paged_kv_kernel
        for step in range(3):
            _, cad = build(lab, draft(grown=Q * step))
            (grid, args, _), = kernel.launches[step:]
            assert grid == (cad.num_reqs, 1, 1) and args[3] is cad.seq_lens and args[4] is cad.block_table_tensor
            assert args[6] == cad.num_reqs


def test_a_joining_request_or_a_new_block_plans_again_and_uneven_queries_always_do():
    """The key is (num_reqs, max_query_len), which fixes qo_indptr for uniform blocks only: a batch whose queries
    differ in length is planned every time, as at step 7 (DFlash's drafts never are such a batch). Fewer requests
    keep the plan (their rows empty), more plan again."""
    with RoutingLab(8) as lab:
        expected = 0
        for batch, plans_it in ((draft(4), True), (draft(4, grown=Q), False), (draft(3), False),
                                 (draft(3, grown=2 * Q), False), (draft(4, grown=3 * Q), True),  # one wrapper
                                 (draft(4, query_lens=(Q, 8, Q, 8)), True),
                                 (draft(4, query_lens=(8, Q, 8, Q)), True),  # same size and max, other qo_indptr
                                 (draft(4, query_lens=(8, Q, 8, Q), grown=Q), True),
                                 (draft(4, query_lens=(8, 8, 8, 8)), True),
                                 (draft(4, query_lens=(8, 8, 8, 8), grown=Q), False),  # uniform: kept
                                 (draft(2, query_lens=(8, 8)), False),  # and fewer of them
                                 (draft(4, grown=4 * Q), True)):
            expected += plans_it
            _, cad = build(lab, batch)
            assert plans(lab) == expected, batch
            assert written_page_table(lab.builders["draft"][0], cad.num_reqs) == exact_page_table(cad)


def test_the_gpu_tests_draft_steps_plan_where_the_gpu_test_expects():
    """tests/gpu runs PLAN_REUSE_STEPS through the real kernel and expects plan() exactly where `expects_plan` says."""
    from dflash_fi.lab.host_work import PLAN_REUSE_STEPS

    with RoutingLab(8) as lab:
        for index, step in enumerate(PLAN_REUSE_STEPS):
            before = plans(lab)
            _, cad = build(lab, step.batch)
            assert plans(lab) - before == step.expects_plan, index
            assert written_page_table(lab.builders["draft"][0], cad.num_reqs) == exact_page_table(cad), index
    cads = [common_metadata(s.batch) for s in PLAN_REUSE_STEPS]
    assert any(-(-b // KV_PAGE_SIZE) > -(-e // KV_PAGE_SIZE) for c in cads  # a bound a page above its length
               for b, e in zip(c.seq_lens_cpu_upper_bound.tolist(), c.seq_lens.tolist()))


def test_each_draft_step_attends_over_its_own_exact_page_table():
    """The lab's model of FA2's run() attends over the page table the wrapper's buffers hold when it runs: a reused
    plan whose buffers were left on an earlier step's arrays (plan()'s copies of the bounds, a stale qo_indptr)
    would attend over the wrong keys. Each step against the reference on its exact lengths, the GPU test's steps."""
    from dflash_fi.lab.host_work import PLAN_REUSE_STEPS
    from dflash_fi.reference.paged_attention import paged_attention_reference

    torch.manual_seed(0)
    with RoutingLab(8) as lab:
        builder = lab.builders["draft"][0]
        kv = torch.randn(800, 2, KV_PAGE_SIZE, builder.num_kv_heads, builder.head_dim)
        for index, step in enumerate(PLAN_REUSE_STEPS):
            md, cad = build(lab, step.batch)
            q = torch.randn(cad.num_actual_tokens, builder.num_qo_heads, builder.head_dim)
            expected = paged_attention_reference(q, kv, cad.block_table_tensor, cad.seq_lens, cad.query_start_loc_cpu,
                                                 causal=False)
            torch.testing.assert_close(md.prefill.wrapper.run(q, kv), expected, msg=f"draft step {index}")


def test_a_plan_from_exact_host_lengths_is_never_reused():
    with RoutingLab(8) as lab:
        build(lab, draft())
        cad = common_metadata(draft())
        cad._seq_lens_cpu = cad.seq_lens.clone()  # a non-causal batch whose host lengths are exact
        md, _ = build(lab, draft(), cad)
        assert plans(lab) == 2 and md.prefill.wrapper.plans[-1]["disable_split_kv"] is False
        build(lab, draft(grown=Q))
        build(lab, draft(grown=2 * Q))
        assert plans(lab) == 3  # planned from bounds again, then reused


def test_a_draft_that_starts_a_shape_builds_as_at_step7():
    before, after = draft_build_reads_gpu_lengths(7), draft_build_reads_gpu_lengths(8)
    assert after["copied_from_gpu"] is False
    assert {k: v for k, v in after.items() if k not in ("step", "kernel_kv_lens")} == {
        k: v for k, v in before.items() if k not in ("step", "kernel_kv_lens")}
    assert before["kernel_kv_lens"] == before["exact_seq_lens"] and not any(after["kernel_kv_lens"])  # not written


@pytest.mark.parametrize("trtllm, cuda_graphs", [(False, False), (False, True), (True, False)])
def test_every_batch_routes_as_at_step7(trtllm, cuda_graphs):
    seven, eight = (routing_report(s, trtllm=trtllm, cuda_graphs=cuda_graphs).routes for s in (7, 8))
    assert eight == seven
    with RoutingLab(8, BLACKWELL if trtllm else HOPPER, trtllm=trtllm, cuda_graphs=cuda_graphs) as lab:
        assert lab.route(STANDARD_BATCHES[0]) == lab.route(STANDARD_BATCHES[0])  # the second reuses the plan
        assert plans(lab) == 1


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_the_runner_still_plans_nothing_for_the_draft_layers(cuda_graphs):
    rows = runner_builds_for_draft_layers(8, cuda_graphs)
    assert rows and not any(row["planned"] or row["plans_so_far"] for row in rows)


@pytest.mark.parametrize("flag, message", [("use_dcp", "decode context parallelism"), ("is_kvcache_nvfp4", "NVFP4")])
def test_dcp_and_nvfp4_are_refused_before_a_held_plan_is_reused(flag, message):
    # The flags are fixed when a builder is made; set here after a plan, they show the refusal comes first.
    with RoutingLab(8, BLACKWELL) as lab:
        builder = lab.builders["draft"][0]
        build(lab, draft())
        launches = len(lab.module._fill_paged_kv_kernel.launches)
        setattr(builder, flag, True)
        with pytest.raises(NotImplementedError, match=message):
            build(lab, draft(grown=Q))
        assert len(lab.module._fill_paged_kv_kernel.launches) == launches and plans(lab) == 1


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_the_page_table_kernel_on_empty_full_and_many_page_requests(dtype):
    """The kernel's own source: empty requests, exact pages, requests longer than a block of pages, many requests
    before one (a small BLOCK_SIZE makes both loops run several times), a block table with padded rows."""
    lens = torch.tensor([0, 16, 17, 1, 200, 0, 33, 160, 15], dtype=dtype)
    pages = (lens + KV_PAGE_SIZE - 1) // KV_PAGE_SIZE
    table = torch.arange(len(lens) * 20, dtype=torch.int32).view(len(lens), 20)[:, :16] + 1000  # row stride 20
    indptr, last, indices = (torch.full((n,), -1, dtype=torch.int32) for n in (len(lens) + 1, len(lens), 100))
    kernel = TritonInterpreted(backend_module(8)._fill_paged_kv_kernel)
    kernel[(len(lens),)](indptr, indices, last, lens, table, table.stride(0), len(lens), PAGE_SIZE=KV_PAGE_SIZE,
                         BLOCK_SIZE=4)
    assert indptr.tolist() == [0, *accumulate(pages.tolist())]
    assert last.tolist() == [0, 16, 1, 1, 8, 0, 1, 16, 15]
    assert indices[: indptr[-1]].tolist() == [int(p) for r, n in enumerate(pages.tolist()) for p in table[r, :n]]
    assert (indices[indptr[-1]:] == -1).all()  # nothing written past the table


def test_the_page_table_kernel_gives_rows_past_the_batch_no_pages():
    """Rows of a held plan whose requests left (program ids from num_reqs on): no pages, whatever seq_lens holds
    there, and every page offset past the batch at its total; the batch's own rows as before."""
    lens = torch.tensor([5, 40, 17, 99, 99], dtype=torch.int32)  # the last two are past the batch: not read
    table = torch.arange(5 * 8, dtype=torch.int32).view(5, 8) + 100
    indptr, last, indices = (torch.full((n,), -1, dtype=torch.int32) for n in (6, 5, 60))
    kernel = TritonInterpreted(backend_module(8)._fill_paged_kv_kernel)
    kernel[(5,)](indptr, indices, last, lens, table, table.stride(0), 3, PAGE_SIZE=KV_PAGE_SIZE, BLOCK_SIZE=2)
    assert indptr.tolist() == [0, 1, 4, 6, 6, 6] and last.tolist() == [5, 8, 1, 0, 0]
    assert indices[:6].tolist() == [100, 108, 109, 110, 116, 117] and (indices[6:] == -1).all()


def test_requests_that_leave_keep_their_rows_empty_and_one_that_joins_plans_again():
    """Three requests leave one by one, then one joins: one plan until the join. Each build empties the plan's rows
    past the batch (no queries in the wrapper's qo_indptr, no pages), and run() attends over the batch's own rows."""
    from dflash_fi.reference.paged_attention import paged_attention_reference

    torch.manual_seed(0)
    with RoutingLab(8) as lab:
        builder = lab.builders["draft"][0]
        kv = torch.randn(200, 2, KV_PAGE_SIZE, builder.num_kv_heads, builder.head_dim)
        for n, grown, planned in ((4, 0, 1), (3, Q, 1), (2, 2 * Q, 1), (1, 3 * Q, 1), (1, 4 * Q, 1), (2, 5 * Q, 2)):
            md, cad = build(lab, draft(n, grown=grown))
            wrapper = md.prefill.wrapper
            rows = 4 if planned == 1 else 2
            assert plans(lab) == planned and builder._noncausal_plan_rows == rows, n
            assert wrapper._qo_indptr_buf.tolist() == [min(r, n) * Q for r in range(rows + 1)]
            assert wrapper._paged_kv_indptr_buf.tolist()[n:] == [exact_page_table(cad)["indptr"][-1]] * (rows - n + 1)
            assert wrapper._paged_kv_last_page_len_buf.tolist()[n:] == [0] * (rows - n)
            assert md.num_prefills == n and md.num_actual_tokens == n * Q
            q = torch.randn(cad.num_actual_tokens, builder.num_qo_heads, builder.head_dim)
            expected = paged_attention_reference(q, kv, cad.block_table_tensor, cad.seq_lens, cad.query_start_loc_cpu,
                                                 causal=False)
            torch.testing.assert_close(wrapper.run(q, kv), expected)


def test_a_request_that_leaves_plans_again_where_an_empty_row_would_be_two_query_tiles():
    """A 16-query block with 8 query heads per KV head packs 128 rows: FA2 may tile that in two, and a second tile of
    an empty row would take a KV range as if it had queries. There the builder plans again when a request leaves."""
    with RoutingLab(8) as lab:
        builder = lab.builders["draft"][0]
        build(lab, draft(4))
        build(lab, draft(3, grown=Q))
        assert plans(lab) == 1 and builder._one_query_tile(Q)
        builder.num_qo_heads = 8 * builder.num_kv_heads  # fixed when a builder is made; set here to show the gate
        assert not builder._one_query_tile(Q) and builder._one_query_tile(Q // 2)
        build(lab, draft(2, grown=2 * Q))
        assert plans(lab) == 2 and builder._noncausal_plan_rows == 2
        build(lab, draft(2, grown=3 * Q))
        assert plans(lab) == 2  # the same batch size keeps it


@pytest.mark.parametrize("seq_lens", ["*i32", "*i64"])
@pytest.mark.parametrize("compute_capability", [89, 90])  # the RTX 4090, the H100/H200
def test_the_page_table_kernel_compiles_for_the_gpus_it_runs_on(compute_capability, seq_lens, tmp_path, monkeypatch):
    """Triton's own compiler, down to a cubin (Triton's bundled ptxas), for SM 8.9 and 9.0: no GPU needed. First the
    lab interprets the kernel, as it does before tests/gpu compiles kernels in a whole-suite run on a GPU machine."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    one = torch.ones(1, dtype=torch.int32)
    TritonInterpreted(backend_module(8)._fill_paged_kv_kernel)[(1,)](
        torch.zeros(2, dtype=torch.int32), one.clone(), one.clone(), one, one, 1, 1, PAGE_SIZE=KV_PAGE_SIZE,
        BLOCK_SIZE=8)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    kernel = triton.jit(triton_source(backend_module(8)._fill_paged_kv_kernel))
    signature = {"paged_kv_indptr": "*i32", "paged_kv_indices": "*i32", "paged_kv_last_page_len": "*i32",
                 "seq_lens": seq_lens, "block_table": "*i32", "block_table_stride": "i32", "num_reqs": "i32",
                 "PAGE_SIZE": "constexpr", "BLOCK_SIZE": "constexpr"}
    assert list(signature) == kernel.arg_names
    compiled = triton.compile(ASTSource(kernel, signature, {"PAGE_SIZE": KV_PAGE_SIZE, "BLOCK_SIZE": 1024}),
                              target=GPUTarget("cuda", compute_capability, 32))
    assert compiled.asm["cubin"] and f"sm_{compute_capability}" in compiled.asm["ptx"]


def test_flashinfers_fa2_query_tile_is_never_shorter_than_a_packed_query_length_of_at_most_64():
    """Why `_one_query_tile` gates at 64 packed queries (notebook 7 shows the function): FlashInfer's
    FA2DetermineCtaTileQ gives 128 above 64 (head sizes under 256), else 64 above 16 or before SM 8.0, else 16."""
    import re
    from pathlib import Path

    import flashinfer

    from dflash_fi.lab.flashinfer_source import FA2_QUERY_TILE_EXCERPT

    text = (Path(flashinfer.__file__).parent / "data" / "include" / FA2_QUERY_TILE_EXCERPT[0]).read_text()
    body = text[re.search(FA2_QUERY_TILE_EXCERPT[1], text).start():]
    body = body[: body.index("\n}\n")]
    assert re.findall(r"avg_packed_qo_len > (\d+)", body) == ["64", "16"]
    assert re.findall(r"return (\d+);", body) == ["128", "64", "16", "64"]


def test_flashinfers_fa2_run_never_hands_its_kernel_the_kv_lens_buffer():
    """Why step 8 drops step 7's copy into `_kv_lens_buffer`: the draft's wrapper runs FA2 (step 5), and in
    FlashInfer's paged prefill only the trtllm-gen branch passes `kv_lens_buffer` to a kernel."""
    from flashinfer import prefill

    assert backend_module(8).NON_CAUSAL_PREFILL_BACKEND == "fa2"
    source = inspect.getsource(prefill.get_batch_prefill_module)
    paged_run = source[source.index("def paged_run("):]
    trtllm = paged_run[paged_run.index('if backend == "trtllm-gen":'):paged_run.index('elif backend == "fa2":')]
    fa2 = paged_run[paged_run.index('elif backend == "fa2":'):paged_run.index("else:", paged_run.index('"fa2"'))]
    assert "kv_lens_buffer" in trtllm and "kv_lens_buffer" not in fa2


@pytest.mark.filterwarnings("error:Conversion of an array with ndim > 0 to a scalar:DeprecationWarning")
def test_the_interpreted_page_table_kernel_runs_where_numpy_refuses_one_element_arrays_as_ints():
    """NumPy 2.4 refuses `int(array of one element)`, which Triton's interpreter uses for loop bounds: the GPU machine's
    NumPy stopped the walkthrough's CPU section there. Here NumPy's own deprecation of it is an error, as it is there."""
    from dflash_fi.lab.routing import routing_report

    from dflash_fi.lab.routes import Prefill

    draft = routing_report(8).routes[0]
    assert draft.prefill is Prefill.NON_CAUSAL and draft.dflash_check_passed
