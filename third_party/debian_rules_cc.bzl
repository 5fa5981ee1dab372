"""Debian's rules_cc (0.0.4), adapted to the Bazel 4.2.3 that Debian ships.

Two files of rules_cc 0.0.4 load `use_cpp_toolchain`, which Bazel 4.2.3 lacks. This
repository rule copies /usr/share/bazel/rules/cc and, in those two files, drops that symbol
from the load and names the C++ toolchain type directly. Nothing is downloaded.
"""

_SOURCE = "/usr/share/bazel/rules/cc"

_PATCHED = [
    "cc/private/rules_impl/compiler_flag.bzl",
    "cc/private/rules_impl/cc_flags_supplier.bzl",
]

def _debian_rules_cc_impl(ctx):
    result = ctx.execute(["cp", "-r", _SOURCE + "/.", "."])
    if result.return_code != 0:
        fail("cannot copy %s (is bazel-rules-cc installed?): %s" % (_SOURCE, result.stderr))
    for path in _PATCHED:
        text = ctx.read(path)
        text = text.replace(', "use_cpp_toolchain")', ")")
        text = text.replace("use_cpp_toolchain()", '["@bazel_tools//tools/cpp:toolchain_type"]')
        ctx.file(path, text, executable = False)

debian_rules_cc = repository_rule(
    implementation = _debian_rules_cc_impl,
    local = True,
)
