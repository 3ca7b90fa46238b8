"""A seccomp filter for the sandboxed check (bwrap `--seccomp FD`), as classic BPF.

x86-64 only (elsewhere there is none, and gates.task.sandbox says so): any other ABI (x32,
i386) kills the process; new processes (fork, vfork, clone without CLONE_THREAD) are
refused, clone3 answers ENOSYS so that threads fall back to clone; and the calls that
reach past the namespaces or into the kernel's rarer corners are refused: ptrace,
process_vm_*, mount, pivot_root, chroot, unshare, setns, bpf, perf_event_open,
userfaultfd, io_uring, keys, modules, kexec, handles, swap, reboot, host names.
"""

from __future__ import annotations

import errno
import platform
import struct

_AUDIT_ARCH_X86_64 = 0xC000003E
_X32_BIT = 0x40000000
_CLONE_THREAD = 0x00010000
_CLONE, _CLONE3 = 56, 435
_REFUSED = (
    57, 58,  # fork, vfork
    101, 310, 311,  # ptrace, process_vm_readv, process_vm_writev
    135, 155, 161, 163, 165, 166, 167, 168, 169, 170, 171,  # personality … setdomainname
    175, 176, 246, 313,  # init_module, delete_module, kexec_load, finit_module
    248, 249, 250,  # add_key, request_key, keyctl
    272, 308,  # unshare, setns
    298, 303, 304, 321, 323,  # perf_event_open, *_handle_at, bpf, userfaultfd
    425, 426, 427,  # io_uring_*
)  # fmt: skip

_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_NR, _ARCH, _ARG0 = 0, 4, 16


def supported() -> bool:
    return platform.machine() in ("x86_64", "AMD64")


def program() -> bytes:
    """The filter, as bwrap reads it: struct sock_filter[] in native byte order."""
    body: list[tuple[int, int, int, int]] = []
    # Jumps are forward: each check is placed knowing how many instructions follow it.
    refusals = [(_JEQ, nr) for nr in _REFUSED]
    tail = [
        (_RET, 0, 0, _ALLOW),  # +0 no rule matched
        (_LD_ABS, 0, 0, _ARG0),  # +1 clone: its flags (low word)
        (_JSET, 0, 1, _CLONE_THREAD),  # +2 a thread: allow, else refuse
        (_RET, 0, 0, _ALLOW),  # +3
        (_RET, 0, 0, _ERRNO | errno.EPERM),  # +4 refused
        (_RET, 0, 0, _ERRNO | errno.ENOSYS),  # +5 clone3
    ]
    checks = [(_JGE, _X32_BIT), *refusals, (_JEQ, _CLONE3), (_JEQ, _CLONE)]
    for index, (code, value) in enumerate(checks):
        after = len(checks) - index - 1  # checks left after this one
        if value == _CLONE3:
            target = after + 5
        elif value == _CLONE:
            target = after + 1
        else:
            target = after + 4
        body.append((code, target, 0, value))
    head = [
        (_LD_ABS, 0, 0, _ARCH),
        (_JEQ, 1, 0, _AUDIT_ARCH_X86_64),
        (_RET, 0, 0, _KILL_PROCESS),
        (_LD_ABS, 0, 0, _NR),
    ]
    return b"".join(struct.pack("=HBBI", *op) for op in (*head, *body, *tail))
