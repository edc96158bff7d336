"""Step 7 on the real FlashInferMetadataBuilder (wrappers are doubles): draft builds that never wait for the GPU,
no build for metadata nobody reads, CUDA-graph wrappers only for the batches a full graph replays."""

from itertools import accumulate

import pytest

from dflash_fi.lab.batches import STANDARD_BATCHES, Batch, common_metadata
from dflash_fi.lab.host_work import draft_build_reads_gpu_lengths, runner_builds_for_draft_layers
from dflash_fi.lab.routing import RoutingLab, routing_report
from dflash_fi.vocabulary import DRAFT_BLOCK_SIZE, HOPPER, KV_PAGE_SIZE

pytestmark = pytest.mark.step7
DRAFT = STANDARD_BATCHES[0]


def pages(lengths):
    return [-(-n // KV_PAGE_SIZE) for n in lengths]


def test_a_draft_build_plans_from_host_bounds_and_leaves_the_exact_page_table_to_the_kernel():
    before, after = draft_build_reads_gpu_lengths(6), draft_build_reads_gpu_lengths(7)
    assert before["copied_from_gpu"] is True and after["copied_from_gpu"] is False
    exact, bounds = after["exact_seq_lens"], after["upper_bounds"]
    assert all(b >= e for b, e in zip(bounds, exact)) and pages(bounds) != pages(exact)  # one crosses a page
    assert after["planned_indptr"][1:] == list(accumulate(pages(bounds)))
    assert after["kernel_indptr"][1:] == list(accumulate(pages(exact)))
    assert after["kernel_indptr"] == before["kernel_indptr"] and after["kernel_last_page_len"] == before["kernel_last_page_len"]
    assert after["kernel_last_page_len"] == [(n - 1) % KV_PAGE_SIZE + 1 for n in exact]
    assert after["kernel_kv_lens"] == exact
    assert after["max_token_per_sequence"] == DRAFT_BLOCK_SIZE and before["max_token_per_sequence"] is None
    assert after["disable_split_kv"] is True and before["disable_split_kv"] is False


def test_a_batch_with_host_lengths_still_plans_from_them():
    from vllm.config import set_current_vllm_config

    with RoutingLab(7) as lab:
        builder, _, config = lab.builders["draft"]
        cad = common_metadata(DRAFT)
        cad._seq_lens_cpu = cad.seq_lens.clone()  # a non-causal batch whose host lengths are known exactly
        with set_current_vllm_config(config):
            md = builder.build(0, cad)
    assert builder.paged_kv_indptr.cpu[1:5].tolist() == list(accumulate(pages(cad.seq_lens.tolist())))
    assert not hasattr(md.prefill.wrapper, "_paged_kv_indptr_buf")  # plan()'s own copy is what the kernel reads


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_the_runner_plans_nothing_for_the_draft_layers_on_target_steps(cuda_graphs):
    assert all(row["planned"] for row in runner_builds_for_draft_layers(6, cuda_graphs))
    rows = runner_builds_for_draft_layers(7, cuda_graphs)
    assert len(rows) == 4 and not any(row["planned"] or row["plans_so_far"] for row in rows)


def test_unread_metadata_fails_loudly_if_a_forward_ever_reads_it():
    from dflash_fi.steps import patched_source

    source = patched_source(7)
    assert "is never planned and must not be read" in source
    from vllm.config import set_current_vllm_config

    with RoutingLab(7) as lab:
        builder, _, config = lab.builders["draft"]
        with set_current_vllm_config(config):
            md = builder.build(0, common_metadata(STANDARD_BATCHES[4]))  # a target verify batch
        assert md.prefill.wrapper is None and md.num_prefill_tokens == md.num_actual_tokens > 0
        target_builder = lab.builders["target"][0]
        assert target_builder._draft_layers_only is False and builder._draft_layers_only is True


def test_draft_blocks_get_the_plain_wrapper_and_the_target_keeps_its_graph_wrappers():
    rows = {r["batch"]: r for r in routing_report(7, cuda_graphs=True)["batches"]}
    assert rows[DRAFT.name]["prefill"] == "FlashInfer prefill (separate non-causal wrapper)"
    assert rows[DRAFT.name]["prefill_kernel"] == "fa2" and rows[DRAFT.name]["host_seq_lens"] == "upper bound, no copy"
    assert rows["target spec verify: 4 x (1 + 15)"]["prefill"] == "FlashInfer prefill (CUDA-graph wrapper, batch size 4)"
    with RoutingLab(7, HOPPER, cuda_graphs=True) as lab:
        for n in (1, 3):
            lab.route(Batch("draft", (DRAFT_BLOCK_SIZE,) * n, (40,) * n, False, (7,) * n))
        assert getattr(lab.builders["draft"][0], "_prefill_wrappers_cudagraph", {}) == {}


def test_the_claim_follows_the_wrappers_and_the_engine_keeps_its_full_graphs():
    from dflash_fi.lab.graphs import cudagraph_claims
    from dflash_fi.vocabulary import BLACKWELL

    for capability, trtllm in ((HOPPER, False), (BLACKWELL, True)):
        claims = cudagraph_claims(7, capability, trtllm)
        assert claims["flashinfer_claim"] == "UNIFORM_BATCH" and claims["resolved_mode"] == "FULL_AND_PIECEWISE"
        assert claims["flashinfer_claim_draft_config"] == "UNIFORM_SINGLE_TOKEN_DECODE"  # as #48167 (step 5)
