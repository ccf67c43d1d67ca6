"""The one error hierarchy: one line, the object named, the errno by name."""

import errno

from bpfbatch.errors import (
    ENOTSUPP,
    KernelError,
    NotSupportedError,
    PartialError,
    errno_name,
    from_errno,
)


def test_enotsupp_is_named_and_explained_although_libc_does_not_know_it():
    err = from_errno("delete batch", ENOTSUPP, obj="map 7 'flows'")
    assert isinstance(err, NotSupportedError)
    assert str(err) == "map 7 'flows': delete batch: not supported by the kernel for this object (ENOTSUPP)"


def test_negative_codes_from_libbpf_are_accepted():
    err = from_errno("lookup batch", -errno.EPERM, obj="map 3")
    assert err.errno == errno.EPERM and "(EPERM)" in str(err)


def test_unknown_errno_falls_back_to_libc_text_and_a_numeric_name():
    assert errno_name(4095) == "E4095"
    assert "(E4095)" in str(KernelError("x", 4095))


def test_messages_are_one_line():
    err = PartialError("update batch", errno.E2BIG, applied=3, obj="map 1",
                       detail="element 3\nfailed")
    assert "\n" not in str(err) and err.applied == 3


def test_libbpf_own_codes_are_named_and_explained():
    err = from_errno("open object", -4001, obj="x.o")
    assert str(err) == "x.o: open object: not a valid BPF object file (LIBBPF_ERRNO__FORMAT)"
