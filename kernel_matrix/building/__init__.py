"""Building one variant natively: the plan and its execution (native_build), compiler
command lines (compile), the object cache (objcache) and the host's digest of a build's
recipe that scopes it (recipe), pinned C++ dependencies such as
CUTLASS (dependencies), provenance, build progress lines (progress), and the variant
directory users load (variant_dir). The container path (containers) runs this same code
inside a builder container."""
