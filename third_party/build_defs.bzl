"""Build glue shared by the project's BUILD files."""

def source_files(name = "sources"):
    """Every .cc and .h of the package, for the tests that read sources.

    tests/layering_test.sh reads every #include; the fuzz scripts compile outside Bazel.
    """
    native.filegroup(
        name = name,
        srcs = native.glob(["*.cc", "*.h"]),
        visibility = ["//tests:__pkg__"],
    )
