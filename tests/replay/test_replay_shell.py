"""Launch scripts read as bash reads them (lrdoctor.replay.shell), checked against GNU bash.

The real scripts are the frameworks' own, copied unchanged into
tests/data/launch_scripts (README there cites each commit): OpenRLHF's
train_reinforce_baseline_hybrid_engine.sh (its arguments in bash arrays, once dropped
without a word), slime's run-qwen3-4B.sh (a multi-line quoted JSON string, ``if``
blocks, ``source`` of the model's argument file) and OneVision-Encoder's stage-2 script
(``"$(basename "$0" .sh)"``, associative arrays, ``for`` over ``${!A[@]}``).

The oracle is bash itself: each script is run by ``bash`` with a PATH holding only
``basename`` and ``dirname`` and the launcher defined as a function that writes the
words it receives, so nothing else can run; lrdoctor's reading must give the same
words (an unresolved marker, where lrdoctor says the script does not decide, matches
anything).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay import launch, shell
from lrdoctor.replay.config import load_config
from tests.helpers.paths import TESTS

DATA = TESTS / "data" / "launch_scripts"
OPENRLHF = DATA / "openrlhf" / "train_reinforce_baseline_hybrid_engine.sh"
SLIME = DATA / "slime" / "scripts" / "run-qwen3-4B.sh"
ONEVISION = DATA / "onevision" / "shells" / "ov_encoder_large_stage2_residual_8gpus.sh"

needs_bash = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("basename") is None,
                                reason="GNU bash and coreutils are the oracle")


def bash_words(script_text: str, launcher: str, tmp_path: Path, env: dict[str, str] | None = None,
               stubs: str = "", script: Path | None = None) -> list[str]:
    """The words GNU bash passes to ``launcher`` running ``script_text`` (or ``script``)."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    for tool in ("basename", "dirname"):
        if not (bindir / tool).exists():
            (bindir / tool).symlink_to(shutil.which(tool) or tool)
    out = tmp_path / "words.bin"
    if script is None:
        script = tmp_path / "snippet.sh"
        script.write_text(script_text)
    prelude = (f'{launcher}() {{ [ -e "{out}" ] || printf "%s\\0" "$@" > "{out}"; }}; '
               f"{stubs} . \"$0\"")
    subprocess.run([shutil.which("bash") or "bash", "-c", prelude, str(script)], cwd=tmp_path, timeout=30,
                   env={"PATH": str(bindir), **(env or {})}, capture_output=True)
    assert out.exists(), f"bash never ran {launcher}"
    return out.read_bytes().decode().split("\0")[:-1]


def ours(text: str, launcher: str, path: Path, env: dict[str, str] | None = None) -> list[str]:
    env = dict(env or {})
    read = shell.run_script(text, str(path), {"0": str(path), **env}, set(env),
                            wanted=lambda words: words[0] == launcher)
    assert read.commands, f"lrdoctor found no {launcher} command"
    return read.commands[0].words[1:]


def assert_same(mine: list[str], theirs: list[str]) -> None:
    assert len(mine) == len(theirs), (mine, theirs)
    for a, b in zip(mine, theirs):
        if shell.UNRESOLVED_RE.search(a):  # undecided by the script: any value bash chose
            pattern = "".join(".*" if k % 2 else re.escape(part)
                              for k, part in enumerate(shell.UNRESOLVED_RE.split(a)))
            assert re.fullmatch(pattern, b, re.S), (a, b)
        else:
            assert a == b


SNIPPETS = {
    "multi-line quoted JSON (slime)": 'V=1\nJ="{\n  \\"a\\": \\"${V}\\",\n  \\"b\\": 2\n}"\n'
                                      'show --runtime-env-json="${J}" x\n',
    "arrays and their expansions": 'A=(a "b c" \'d e\'  # a comment\n  f\n)\nA+=(g)\n'
                                   'show "${A[@]}" ${A[@]} "${A[*]}" ${#A[@]} ${A[1]} '
                                   '"${!A[@]}" "pre${A[@]}post"\n',
    "nested quotes in $(...)": 'show "$(basename "/x/y z.sh" .sh)" '
                               '"c/$(dirname "$(dirname "/a/b/c")")" `basename /q/r`\n',
    "parameter operators": 'X=/path/to/file.tar.gz\nshow ${X#*/} ${X##*/} ${X%.*} ${X%%.*} '
                           '${X/to/TO} ${X//t/T} ${X:1:4} ${#X} ${X^^} ${U:-d} ${U-e} '
                           '${X:+set}\n',
    "conditions the script decides": 'N=2\nif [ "$N" -gt 1 ] && [[ $N == 2 ]]; then M=a\n'
                                     'elif true; then M=b\nelse M=c; fi\n'
                                     'case $M in b*) S=1;; a|z) S=2;; *) S=3;; esac\n'
                                     'show $M $S\n',
    "loops, functions, locals": 'L=""\nfor i in 1 2 3; do L="$L$i"; done\n'
                                'f() { local k=$1; show "$@" "$k" "$#"; }\nf a "b c" $L\n',
    "here-documents and continuations": 'cat <<EOF >/dev/null\nshow wrong\nEOF\n'
                                        'show a \\\n  b \\\n  c # a comment\n',
    "ANSI-C quotes, arithmetic, export": "export A=1 B=\"x y\"\n"
                                         "show $'a\\tb' $((3*(2+1))) $(( -7 / 2 )) $B \"$B\"\n",
    "associative arrays": 'declare -A M=([k1]=v1 [k2]="v 2")\nM[k3]=v3\n'
                          'show "${M[k2]}" ${M[k1]} ${M[k3]} ${#M[@]}\n',
    "locals restored, array slices": 'X=outer\nf() { local X=inner Y; Y=set; Z=$X; }\n'
                                     'f\nA=(a b c d)\nshow "$X" "${Y-unset}" "$Z" '
                                     '"${A[@]:1:2}" "${A[@]: -1}"\n',
    "splitting of unquoted values": 'W="  a   b  "\nE=""\nshow $W "$W" $E "$E" x${W}y\n',
}


@needs_bash
@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_snippets_read_as_gnu_bash_reads_them(name, tmp_path):
    text = SNIPPETS[name]
    assert_same(ours(text, "show", tmp_path / "snippet.sh"),
                bash_words(text, "show", tmp_path, stubs="cat() { :; };"))


@needs_bash
def test_openrlhf_arrays_are_read_as_bash_reads_them(tmp_path):
    """OpenRLHF's script passes every training argument through arrays
    (``ROLLOUT_ARGS=(...)``, ``${ROLLOUT_ARGS[@]}``), with comments inside them."""
    mine = ours(OPENRLHF.read_text(), "ray", OPENRLHF)
    assert_same(mine, bash_words("", "ray", tmp_path, script=OPENRLHF))
    assert "--data.max_samples" in mine and "--train.dynamic_batch_enable" in mine


def test_openrlhf_script_replays_its_array_arguments():
    """Before: the arrays were dropped, '--data.max_samples is not set' was claimed and
    a --set replay ran every array argument at its default (8 updates per step where the
    file gives 1, dynamic batching off, no LRD213 for dynamic filtering)."""
    cfg = load_config(OPENRLHF)
    assert cfg._keys_used["data.max_samples"] == 128000
    # 128000 prompts / rollout.batch_size 128 = 1000 steps of 128 x 8 = 1024 samples;
    # train.batch_size 1024: one update per step
    assert (cfg.train.steps, cfg.train.samples_per_step, cfg.train.mini_batch_size) == \
        (1000, 1024, 1024)
    assert cfg.batching.strategy == "karmarkar_karp"
    # max_tokens_per_gpu 16192 x ring_attn_size 2
    assert cfg.batching.max_tokens_per_microbatch == 32384
    assert [u["key"] for u in cfg._unmodelled] == ["algo.dynamic_filtering_enable"]


@needs_bash
def test_slime_script_with_its_json_conditions_and_sourced_model_args(tmp_path):
    """slime's run-qwen3-4B.sh: the GPU count comes from nvidia-smi inside ``if`` blocks
    (undecided: named, settable), the runtime-env JSON spans 7 lines in one double-quoted
    string, and MODEL_ARGS come from ``source "${SCRIPT_DIR}/models/qwen3-4B.sh"``."""
    text = SLIME.read_text()
    read = shell.run_script(text, str(SLIME), {"0": str(SLIME)},
                            wanted=lambda w: w[:3] == ["ray", "job", "submit"])
    words = read.commands[0].words
    assert "NUM_GPUS" in read.why and "line 32" in read.why["NUM_GPUS"]
    at = words.index("--actor-num-gpus-per-node")
    assert shell.UNRESOLVED_RE.fullmatch(words[at + 1]).group(1) == "NUM_GPUS"
    json_word = next(w for w in words if w.startswith("--runtime-env-json="))
    assert json_word.count("\n") == 6 and '"PYTHONPATH": "/root/Megatron-LM/"' in json_word
    assert words[words.index("--num-layers") + 1] == "36"  # from the sourced file
    assert any("qwen3-4B.sh" in n for n in read.notes)
    stubs = ("pkill() { :; }; sleep() { :; }; nvidia-smi() { :; }; grep() { :; }; "
             "wc() { echo 0; }; tr() { echo 0; };")
    theirs = bash_words("", "ray", tmp_path, env={"NUM_GPUS": "8"}, stubs=stubs, script=SLIME)
    # bash's ray stub records the first ray call with 'job': the stop/start calls come first
    mine = ours(text, "ray", SLIME, env={"NUM_GPUS": "8"})
    assert mine[0] == "stop"
    read8 = shell.run_script(text, str(SLIME), {"0": str(SLIME), "NUM_GPUS": "8"}, {"NUM_GPUS"},
                             wanted=lambda w: w[:3] == ["ray", "job", "submit"])
    assert theirs[0] == "stop"  # both saw the same first ray command
    assert_same(mine, theirs)
    job = read8.commands[0].words
    assert job[job.index("--actor-num-gpus-per-node") + 1] == "8"


@needs_bash
def test_onevision_script_nested_quotes_and_associative_arrays(tmp_path):
    """OneVision-Encoder's stage-2 script was refused at line 48 ('No closing quotation'):
    ``"$(basename "$0" .sh)"`` is valid bash. Its node rank comes from an associative
    array filled by a ``for`` loop and an ``if`` the script decides (localhost)."""
    text = ONEVISION.read_text()
    mine = ours(text, "torchrun", ONEVISION)
    theirs = bash_words("", "torchrun", tmp_path, stubs="mkdir() { :; };", script=ONEVISION)
    assert_same(mine, theirs)
    assert mine[mine.index("--output") + 1] == "ckpts/ov_encoder_large_stage2_residual_8gpus"
    assert mine[mine.index("--nnode") + 1] == "1" and mine[mine.index("--node_rank") + 1] == "0"


@pytest.mark.parametrize("text,line,what", [
    ("X=1\npython3 -m verl.trainer.main_ppo a='unclosed\n\n", 2, "unclosed single quote"),
    ('A=(\n  --x 1\n  --y "2\n', 3, "unclosed double quote"),
    ("if true; then\n  X=1\n", 3, "expected 'fi' to close the 'if' of line 1"),
    ("echo $(basename x\n", 1, "unclosed $( command substitution"),
    ("for x in a b; do\n echo\n", 3, "expected 'done' to close the 'for' of line 1"),
    # slime's build_conda.sh: valid bash the reader does not follow, said with its line
    ("X=1\nyes '' | bash <(curl -L micro.mamba.pm/install.sh)\n", 2,
     "process substitution <(...) is not read"),
    # OpenRLHF's train_ppo_ray_slurm.sh placeholder: bash refuses it too
    ("OPENRLHF_PATH=<OPENRLHF_ROOT_PATH>\n", 1, "'>' without a file or descriptor"),
])
def test_unreadable_constructs_name_the_file_and_line(text, line, what, tmp_path):
    p = tmp_path / "run.sh"
    p.write_text(text)
    with pytest.raises(UnusableInput) as exc:
        load_config(p)
    assert exc.value.path == str(p)
    assert exc.value.message.startswith(f"line {line}: ") and what in exc.value.message


def test_an_argument_list_the_script_does_not_show_is_refused_not_dropped(tmp_path):
    """``"${EXTRA[@]}"`` of an array the script never sets (a sourced file not found, the
    caller's environment) may hold any key: refused with the line, settable."""
    p = tmp_path / "run.sh"
    p.write_text("#!/bin/bash\nsource ./not-here.sh\nARGS=(--rollout.batch_size 8\n"
                 "  --data.max_samples 1024)\n"
                 'python3 -m openrlhf.cli.train_ppo_ray "${ARGS[@]}" "${EXTRA[@]}"\n')
    with pytest.raises(UnusableInput) as exc:
        load_config(p)
    msg = exc.value.message
    assert msg.startswith("line 5: ") and "EXTRA[@]" in msg and "--set EXTRA=" in msg
    cfg = load_config(p, ["EXTRA=(--train.batch_size 4)"])
    assert cfg.train.mini_batch_size == 4 and cfg.train.steps == 128
    assert load_config(p, ["EXTRA="]).train.mini_batch_size == 128  # OpenRLHF's default


def test_a_variable_the_branches_set_differently_is_named_with_its_condition(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text('if [ -f /etc/big ]; then BS=64; else BS=32; fi\nMINI=16\n'
                 'if [ "$MINI" -gt 8 ]; then MICRO=2; fi\n'
                 "python3 -m verl.trainer.main_ppo data.train_batch_size=$BS \\\n"
                 "  actor_rollout_ref.actor.ppo_mini_batch_size=$MINI \\\n"
                 "  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO \\\n"
                 "  trainer.total_training_steps=3\n")
    with pytest.raises(UnusableInput, match=r"data.train_batch_size comes from BS.*"
                                            r"--set data.train_batch_size=VALUE"):
        load_config(p)
    cfg = load_config(p, ["BS=32"])
    assert cfg.train.samples_per_step == 32 and cfg.train.micro_batch_size == 2
    cmd = launch.parse_script(p.read_text(), {}, p)
    assert cmd is not None and "line 1" in cmd.why["BS"]


def test_trainer_command_under_an_undecided_condition_is_said(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text('if [ "$MODE" = big ]; then\n'
                 "  python3 -m verl.trainer.main_ppo data.train_batch_size=64\n"
                 "else\n  python3 -m verl.trainer.main_ppo data.train_batch_size=32\nfi\n")
    cmd = launch.parse_script(p.read_text(), {}, p)
    assert cmd is not None and cmd.line == 2
    assert any("condition at line 1" in n for n in cmd.notes)
    assert any("line(s) 4 are not replayed" in n for n in cmd.notes)
    assert launch.parse_script(p.read_text(), {"MODE": "small"}, p).line == 4
