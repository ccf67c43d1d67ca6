"""The verifier's reason, picked out of libbpf's log text (no kernel needed)."""

from bpfbatch.loader import _verifier_verdict

LOG = """libbpf: prog 'bad': BPF program load failed: Permission denied
libbpf: prog 'bad': -- BEGIN PROG LOAD LOG --
0: R1=ctx() R10=fp0
; __u32 key = 0;
0: (b4) r1 = 0                        ; R1_w=0
""" + "1: (85) call bpf_get_prandom_u32#7  ; R0_w=scalar()\n" * 300 + """5: (79) r0 = *(u64 *)(r0 +0)
R0 invalid mem access 'map_value_or_null'
processed 5 insns (limit 1000000) max_states_per_insn 0 total_states 0 peak_states 0
-- END PROG LOAD LOG --
libbpf: prog 'bad': failed to load: -13
"""


def test_last_line_before_the_statistics():
    assert _verifier_verdict(LOG) == ("bad", "R0 invalid mem access 'map_value_or_null'")


def test_a_log_cut_before_its_end_marker_has_no_verdict():
    assert _verifier_verdict(LOG[:4095]) is None


def test_no_load_log_no_verdict():
    assert _verifier_verdict("libbpf: map 'counts': failed to create: -1\n") is None
