# shellcheck shell=bash
# Sourced by tools/pack: which shared libraries a bundle ships and which the
# machine it runs on must provide. A library the node provides is a leaf of the
# dependency walk: its own dependencies are the node's business too.
#
# library_class SONAME prints one of
#   system  glibc, the GCC runtime and libstdc++: every Linux machine has them,
#           and a private copy of glibc cannot be mixed with the node's loader
#   gpu     the NVIDIA driver, CUDA, cuDNN and NCCL: they must match the node's
#           driver, so the node provides them
#   mpi     Open MPI: it must match the node's launcher (mpirun / srun, PMIx) and
#           interconnect, and it dlopens its components from its own install
#           path, so the node provides it (docs/bundle.md)
#   bundle  everything else: copied into the bundle's lib/
library_class() {
  case "$1" in
    ld-linux*.so* | libc.so.* | libm.so.* | libmvec.so.* | libpthread.so.* | libdl.so.* | \
      librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libBrokenLocale.so.* | \
      libthread_db.so.* | libgcc_s.so.* | libstdc++.so.*)
      echo system ;;
    libcuda.so* | libcudart.so* | libcublas*.so* | libcudnn*.so* | libnccl*.so* | libnvrtc*.so* | \
      libnvJitLink*.so* | libcufft*.so* | libcurand*.so* | libcusparse*.so* | libcusolver*.so* | \
      libnvidia-*.so* | libnvToolsExt*.so* | libcupti*.so* | libnpp*.so* | libnvjpeg*.so*)
      echo gpu ;;
    libmpi.so.* | libmpi_*.so.*)
      echo mpi ;;
    *)
      echo bundle ;;
  esac
}
