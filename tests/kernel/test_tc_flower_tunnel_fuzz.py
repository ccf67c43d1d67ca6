"""flower's tunnel and MPLS keys against the installed tc, many lines at once: a batch of random
flower lines drawn from those keys' words (their prefixes, numbers at and past each field's
bounds, masks, option fields too few and too many, ``mpls lse`` entries, and a few of flower's
own words between them) runs through ``tc -force -b`` and ``bpfbatch tc --force -b``: stdout,
stderr, exit status, state and every netlink message must be equal. The lines are drawn from
a fixed seed (the same batch every run) and are made so that tc goes on after each: no value
missing, no prefix tc exits on, no value tc 6.1 crashes on (see the README)."""

from __future__ import annotations

import random
import sys

from tc_helpers import captured_messages, masked, side_by_side, veth_netns

LINES = 150
_NUMBERS = ["0", "1", "7", "8", "255", "256", "0x10", "0xff", "ff", "f0", "010", "-1", "+5",
            "65535", "65536", "1048575", "1048576", "4294967295", "4294967296", "x", "1x",
            "0x", "-0"]
_PREFIXES = ["10.0.0.1", "10.0.0.0/8", "10.1/255.255.0.0", "1::1", "1::/64", "any", "all",
             "default", "1.2.3.4/0x10", "0x1.2", "::ffff:1.2.3.4/96", "1::/255.255.0.0"]
_PROTOCOLS = ["protocol ip ", "protocol ipv6 ", "protocol mpls_uc ", "protocol mpls_mc ", ""]
#: flower's own words, between the keys (an action ends the line: it takes the rest).
_FLOWER_WORDS = ["ip_proto udp", "classid 1:1", "verbose", "skip_sw"]


def _line(rng: random.Random) -> str:
    def number() -> str:  # as often one every field takes as any
        return rng.choice(["1", "0", "3"]) if rng.random() < 0.5 else rng.choice(_NUMBERS)

    def hex_digits() -> str:
        return "".join(rng.choice("0123456789abcdefg") for _ in range(rng.randint(0, 7)))

    def fields(count: int, least: int, read) -> str:
        """``count`` fields, one fewer (not below ``least``), one more, or one."""
        return ":".join(read() for _ in range(max(least, rng.choice([count, count, count - 1,
                                                                     count + 1, 1]))))

    def masked_value(read) -> str:
        return read() + (f"/{read()}" if rng.random() < 0.4 else "")

    def geneve() -> str:
        return ",".join(fields(3, 1, lambda: rng.choice([number(), hex_digits(), "0102"]))
                        + (f"/{fields(3, 1, hex_digits)}" if rng.random() < 0.4 else "")
                        for _ in range(rng.randint(1, 3)))

    def lse() -> str:
        words = ["lse", rng.choice(["depth", "d"]), rng.choice(["1", "2", "0", "x"])]
        for _ in range(rng.randint(0, 4)):
            words += [rng.choice(["depth", "label", "l", "tc", "t", "bos", "b", "ttl", "tt"]),
                      number()]
        return " ".join(words)

    keys = {
        "enc_key_id": number, "enc_k": number, "enc_dst_port": number,
        "enc_tos": lambda: masked_value(number), "enc_t": lambda: masked_value(number),
        "enc_ttl": lambda: masked_value(number),
        "enc_dst_ip": lambda: rng.choice(_PREFIXES), "e": lambda: rng.choice(_PREFIXES),
        "enc_src_ip": lambda: rng.choice(_PREFIXES),
        "geneve_opts": geneve, "g": geneve, "vxlan_opts": lambda: masked_value(number),
        "vx": lambda: masked_value(number),
        # at least one ':' or a mask: tc overruns a buffer on a bare erspan field
        "erspan_opts": lambda: fields(4, 2, number) + (f"/{fields(4, 1, number)}"
                                                       if rng.random() < 0.4 else ""),
        # two fields at least in key and mask: tc reads a NULL on fewer
        "gtp_opts": lambda: masked_value(lambda: fields(2, 2, lambda: rng.choice(
            [number(), hex_digits() or "0"]))),
        "mpls_label": number, "mpls_tc": number, "mpls_t": number, "mpls_bos": number,
        "mpls_ttl": number,
        "mpls": lambda: " ".join(lse() for _ in range(rng.randint(0, 2))),
    }
    words = []
    for _ in range(rng.randint(1, 3)):
        if rng.random() < 0.1:
            words.append(rng.choice(_FLOWER_WORDS))
            continue
        key = rng.choice(sorted(keys))
        words.append(f"{key} {keys[key]() or '1'}".rstrip())
    if rng.random() < 0.2:
        words.append("action drop")
    return f"filter add dev vethA ingress {rng.choice(_PROTOCOLS)}flower {' '.join(words)}"


def _batch() -> str:
    rng = random.Random(25)
    lines = []
    while len(lines) < LINES:
        line = _line(rng)
        if not line.endswith(" mpls"):  # mpls with nothing after it: tc exits (incomplete)
            lines.append(line)
    return "".join(line + "\n" for line in lines)


def test_random_lines_like_tc(tmp_path):
    batch = tmp_path / "flower_tunnel.tc"
    batch.write_text("qdisc add dev vethA ingress\n" + _batch())
    theirs, their_state, ours, our_state = side_by_side(batch, ("-force",))
    assert (ours.returncode, ours.stdout, ours.stderr) == \
        (theirs.returncode, theirs.stdout, theirs.stderr)
    assert our_state == their_state
    with veth_netns() as ns_tc, veth_netns() as ns_ours:
        sent_tc = captured_messages(["ip", "netns", "exec", ns_tc, "tc", "-force", "-b",
                                     str(batch)])
        sent_ours = captured_messages([sys.executable, "-c", "from bpfbatch.cli import main; "
                                       "main()", "tc", "--force", "-b", str(batch), "--netns",
                                       ns_ours])
    assert [masked(m).hex() for m in sent_ours] == [masked(m).hex() for m in sent_tc]
