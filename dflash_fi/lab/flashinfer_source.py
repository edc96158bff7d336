"""Where FlashInfer's own source says what steps 7 and 8 rely on, for notebooks to show: each excerpt is the file under
FlashInfer's installed include/, its function's first line, the blocks of lines to show, the lines that stand out
(`dflash_fi.notebook.show_flashinfer_source`)."""

# Where the host side of FlashInfer's fa2 plan() reads the KV lengths, and what split KV off makes of them.
FA2_SCHEDULE_EXCERPT = ("flashinfer/attention/scheduler.cuh", r"inline auto PrefillSplitQOKVIndptr\(",
                        [(r"kv_len_arr\[i\] = ", r"kv_len_arr\[i\] = "), (r"if \(disable_split_kv\)", r"numeric_limits"),
                         (r"int64_t kv_len = ", r"num_chunks_kv = ")], (r"numeric_limits", r"num_chunks_kv = "))


# Where FA2's paged prefill kernel bounds a request's work by its query length (an empty row reads and writes
# nothing), and where a later query tile of an empty row would take a KV range as if it had queries.
EMPTY_ROW_EXCERPT = ("flashinfer/attention/prefill.cuh", r"void BatchPrefillWithPagedKVCacheDevice\(",
                     [(r"const uint32_t qo_len = variant\.qo_len", r"min\(qo_len, ceil_div"),
                      (r"const uint32_t kv_start_idx = ", r"const uint32_t chunk_size = chunk_end - chunk_start"),
                      (r"load_q_global_smem<KTraits>\(qo_packed_idx_base, qo_upper_bound",) * 2,
                      (r"write_o_reg_gmem<KTraits>\(o_frag, &qo_smem, o_ptr_base, qo_packed_idx_base, qo_len",) * 2],
                     (r"min\(qo_len, ceil_div", r"kv_len \+ \(qo_tile_idx", r"chunk_size = chunk_end",
                      r"load_q_global_smem<KTraits>\(qo_packed", r"write_o_reg_gmem<KTraits>\(o_frag"))

# How FA2's plan picks its query tile from the packed query length: never shorter than a packed length of at most 64.
FA2_QUERY_TILE_EXCERPT = ("flashinfer/utils.cuh", r"inline uint32_t FA2DetermineCtaTileQ\(",
                          [(r"if \(avg_packed_qo_len > 64", r"^}")], (r"return \d+;",))
