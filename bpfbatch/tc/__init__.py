"""tc rules over rtnetlink in batches: iproute2's ``tc -batch`` syntax, many messages per
``sendmsg``, every reply mapped back to its command.

Python API::

    from bpfbatch import tc

    rules = [tc.Qdisc("add", "vethA", "ingress")]
    rules += [tc.Filter("add", "vethA", tc.INGRESS, prio=1, protocol=tc.ETH_P_IP,
                        classifier=tc.U32(keys=(tc.ip_match("dst", f"10.0.0.{i}"),),
                                          actions=(tc.Mirred("egress", "redirect", "vethB"),)))
              for i in range(1, 200)]
    with tc.Session(netns="lab") as session:
        report = session.send(rules)
    tc.raise_for(report)   # one-line error if anything failed

Files: ``Session.send_batch(open(path), path)``; the CLI is ``bpfbatch tc -b FILE``.
"""

from .parse import SUPPORTED, parse_batch, parse_command
from .htb import HtbClass, parse_rate
from .rules import (EGRESS, INGRESS, ActionRef, Actions, BpfProg, Class, Filter, Gact, Htb,
                    Matchall, Mirred, Qdisc, U32, U32Key, ip_match, pack_keys)
from .sender import DEFAULT_BATCH_BYTES, Failure, Report, raise_for
from .message import Joined, LineError, Message, Parsed
from .session import BatchInterrupted, Session
from .specs import ETH_P_ALL, ETH_P_IP, ETH_P_IPV6, tc_h_make

__all__ = [
    "SUPPORTED", "parse_batch", "parse_command", "EGRESS", "INGRESS", "ActionRef", "Actions",
    "BpfProg", "Class", "HtbClass", "parse_rate", "Filter", "Gact", "Htb", "Matchall", "Mirred", "Qdisc", "U32", "U32Key",
    "ip_match", "pack_keys", "Joined", "LineError", "Message", "Parsed", "DEFAULT_BATCH_BYTES", "Failure", "Report", "raise_for", "BatchInterrupted", "Session",
    "ETH_P_ALL", "ETH_P_IP", "ETH_P_IPV6", "tc_h_make",
]
