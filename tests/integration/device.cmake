# Device selection (device: auto | cpu | cuda | sim) through the `rig` binary, on any
# machine: see device.sh.
add_test(NAME cli.device
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/device.sh $<TARGET_FILE:rig_cli>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml ${CMAKE_CURRENT_BINARY_DIR}/work/device
          $<TARGET_FILE:rig>)
set_tests_properties(cli.device PROPERTIES LABELS integration TIMEOUT 300)
# Every experiment kind on device: sim against the CPU, byte for byte: see sim_device.sh.
add_test(NAME cli.sim_device
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim_device.sh $<TARGET_FILE:rig_cli>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml ${PROJECT_SOURCE_DIR}/experiments/smoke.yaml
          ${PROJECT_SOURCE_DIR}/experiments/fashion-mnist-resnet20.yaml
          ${CMAKE_CURRENT_BINARY_DIR}/work/sim_device
          # Open MPI's leaks at exit fail sanitizer runs: their two-rank part is skipped.
          $<IF:$<BOOL:${RIG_SANITIZE}>,no-mpi,with-mpi>)
set_tests_properties(cli.sim_device PROPERTIES LABELS integration TIMEOUT 600)
# device: cuda without a GPU: the CUDA back end with its kernels in the SIMT
# emulator (RIG_CUDA_EMULATOR=1) against the CPU, within tolerances: see cuda_emulated.sh.
add_test(NAME cli.cuda_emulated
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/cuda_emulated.sh $<TARGET_FILE:rig_cli>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml ${PROJECT_SOURCE_DIR}/experiments/smoke.yaml
          ${PROJECT_SOURCE_DIR}/experiments/fashion-mnist-resnet20.yaml
          ${CMAKE_CURRENT_BINARY_DIR}/work/cuda_emulated $<IF:$<BOOL:${RIG_SANITIZE}>,quick,full>)
set_tests_properties(cli.cuda_emulated PROPERTIES LABELS integration TIMEOUT 1200)
# The nccl communicator without a GPU: its fake NCCL on the emulated CUDA device,
# 2 ranks against the mpi communicator byte for byte, the watchdog, refusals: see nccl_fake.sh.
if(TARGET rig-communicator-nccl)
  add_test(NAME cli.nccl_fake
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/nccl_fake.sh $<TARGET_FILE:rig_cli>
            ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml ${CMAKE_CURRENT_BINARY_DIR}/work/nccl_fake)
  set_tests_properties(cli.nccl_fake PROPERTIES LABELS "integration;mpi;no_sanitize" TIMEOUT 600
    SKIP_RETURN_CODE 77)
endif()
# Out of memory on an emulated GPU of 64 MiB and on the host: one line that
# says where, what did not fit and what to change (exit 2): see out_of_memory.sh.
# Not under the sanitizers, whose allocators refuse huge requests their own way.
add_test(NAME cli.out_of_memory
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/out_of_memory.sh $<TARGET_FILE:rig_cli>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml ${CMAKE_CURRENT_BINARY_DIR}/work/out_of_memory)
set_tests_properties(cli.out_of_memory PROPERTIES LABELS "integration;no_sanitize" TIMEOUT 300)
# The transformer's recompute_activations: the same bits as without on the CPU,
# in two processes and on the emulated GPU (bf16, fused attention): see recompute.sh.
add_test(NAME cli.recompute
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/recompute.sh $<TARGET_FILE:rig_cli>
          ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny-transformer.yaml
          ${CMAKE_CURRENT_BINARY_DIR}/work/recompute
          # Open MPI's leaks at exit fail sanitizer runs: their two-rank part is skipped.
          $<IF:$<BOOL:${RIG_SANITIZE}>,no-mpi,with-mpi>)
set_tests_properties(cli.recompute PROPERTIES LABELS integration TIMEOUT 600)
# tools/largest-batch on an emulated GPU of 64 MiB: see largest_batch.sh.
add_test(NAME cli.largest_batch
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/largest_batch.sh ${PROJECT_SOURCE_DIR}/tools/largest-batch
          $<TARGET_FILE:rig_cli> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml
          ${CMAKE_CURRENT_BINARY_DIR}/work/largest_batch)
set_tests_properties(cli.largest_batch PROPERTIES LABELS "integration;no_sanitize" TIMEOUT 300)
# tools/kernel-census on the emulated CUDA device: one step's kernels, counted
# (RIG_CUDA_CENSUS): see kernel_census.sh.
add_test(NAME cli.kernel_census
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/kernel_census.sh ${PROJECT_SOURCE_DIR}/tools/kernel-census
          $<TARGET_FILE:rig_cli> ${CMAKE_CURRENT_SOURCE_DIR}/fixtures/tiny.yaml
          ${CMAKE_CURRENT_BINARY_DIR}/work/kernel_census)
set_tests_properties(cli.kernel_census PROPERTIES LABELS "integration;no_sanitize" TIMEOUT 300)
# The kinds PyTorch's profiled kernels are grouped into (tools/bench/torch_profile.py,
# which tools/gpu-check sets beside the timed kernel census): known cuDNN, cuBLAS
# and PyTorch kernel names.
add_test(NAME cli.torch_profile_kinds
  COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/bench/torch_profile.py --self-test)
set_tests_properties(cli.torch_profile_kinds PROPERTIES LABELS "integration" TIMEOUT 60
  PASS_REGULAR_EXPRESSION "self-test: PASS")
