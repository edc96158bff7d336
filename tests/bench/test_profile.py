"""The build profile's plan and its anatomy table (the profiles themselves exist only on a GPU)."""

from dflash_fi.bench.profile import BATCHES, anatomy, anatomy_rows, profile_batches, profile_plan
from dflash_fi.engine.identity import RunId
from dflash_fi.engine.records import (BuildKey, BuildProfile, BuildTiming, EngineRecord, GenerateResult,
                                      ProfiledFunction, Provenance)
from dflash_fi.engine.spec import RunSpec
from dflash_fi.steps import FINAL_STEP


def test_the_plan_profiles_before_and_after_the_final_step_beside_flash_attn():
    specs = profile_plan()
    assert {s.run.step for s in specs if s.run.draft_backend == "FLASHINFER"} == {FINAL_STEP - 1, FINAL_STEP}
    assert {s.num_prompts for s in specs} == set(BATCHES) and all(s.run.cuda_graphs for s in specs)
    for spec in specs:
        spec.validate()


def test_the_anatomy_is_per_build_and_points_at_code():
    key = BuildKey("draft step", "FLASHINFER", 2)
    functions = (ProfiledFunction("plan", "flashinfer/prefill.py", 1500, 40, 0.020, 0.030),
                 ProfiledFunction("floor_divide", "~", 0, 40, 0.004, 0.004))
    generate = GenerateResult(num_requests=32, generate_s=1.0, output_tokens_per_s=1.0, steps=40.0, tokens_sha256="x",
                              builds=(BuildTiming(key, 40, 0.03, 512, 0),))
    record = EngineRecord(RunSpec(RunId(step=7, cuda_graphs=True), num_prompts=32), True,
                          generates={"uniform": generate}, build_profiles=(BuildProfile(key, 0.03, functions),),
                          provenance=Provenance("GPU", "9.0", {}, "abc", "t", "now"))
    table = anatomy({"engines": [record.to_json()]}, batch=32)
    assert "| step 7 FLASHINFER draft, CUDA graphs | FLASHINFER (2 layers) | `plan` (flashinfer/prefill.py:1500) | 1.0 | 0.5000 |" in table
    assert anatomy({"engines": [record.to_json()]}, batch=1).count("\n") == 1  # no engine of that batch: no rows
    assert profile_batches({"engines": [record.to_json()]}) == [32]
    rows = anatomy_rows({"engines": [record.to_json()]}, batch=32, top=None)
    assert [(r["function"], r["calls_per_build"]) for r in rows] == [("plan", 1.0), ("floor_divide", 1.0)]
    assert rows[0]["run"] == record.run and rows[0]["key"] == key and rows[0]["own_ms_per_build"] == 0.5


def test_the_gap_by_cause_compares_builders_role_by_role_without_the_profilers_own_calls():
    from dflash_fi.bench.profile import gap_rows, gap_table, profile_runs

    def engine(run, builders, steps=10.0):  # builders: (role, backend, layers, total_s, functions)
        profiles = tuple(BuildProfile(BuildKey(role, backend, layers), total, tuple(
            ProfiledFunction(name, "vllm/x.py", line, 10, own, own) for name, line, own in functions))
            for role, backend, layers, total, functions in builders)
        generate = GenerateResult(num_requests=1, generate_s=1.0, output_tokens_per_s=1.0, steps=steps,
                                  tokens_sha256="x")
        return EngineRecord(RunSpec(run, num_prompts=1), True, generates={"uniform": generate},
                            build_profiles=profiles, provenance=Provenance("GPU", "9.0", {}, "abc", "t", "now")).to_json()

    disable = "<method 'disable' of '_lsprof.Profiler' objects>"
    flash_attn, final = profile_runs()[0], profile_runs()[-1]
    profile = {"engines": [
        engine(flash_attn, [("target step", "FLASH_ATTN", 6, 0.002, [("build", 388, 0.001)]),
                            ("draft step", "FLASH_ATTN", 2, 0.001, [("build", 388, 0.0005)])]),
        engine(final, [("target step", "FLASH_ATTN", 4, 0.002, [("build", 388, 0.001)]),
                       ("target step", "FLASHINFER", 2, 0.0005, [(disable, 0, 0.0004), ("_unread_metadata", 861, 0.0001)]),
                       ("draft step", "FLASHINFER", 2, 0.0015, [("_build_on_xqa", 1687, 0.001)])])]}
    target, draft = gap_rows(profile, batch=1)
    assert [len(target["flash_attn"]), len(target["final"])] == [1, 2]  # one group there, two here: role by role
    assert [f[0] for _, _, functions in target["final"] for f in functions] == ["build", "_unread_metadata"]
    table = gap_table(profile, batch=1)
    assert "| target step | FLASH_ATTN (6 layers) 0.200 | FLASH_ATTN (4 layers) 0.200; FLASHINFER (2 layers) 0.050 | +0.050 |" in table
    assert "| draft step | FLASH_ATTN (2 layers) 0.100 | FLASHINFER (2 layers) 0.150 | +0.050 |" in table
    assert table.endswith("| all | | | +0.100 | |") and "_lsprof" not in table
    assert gap_rows(profile, batch=32) == []  # no engines of that batch
