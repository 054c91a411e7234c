# The `rig` command end to end: good runs and every bad-input case of the
# foundation issue (exit 2, one clear message, never a crash or a hang).
add_subdirectory(${CMAKE_CURRENT_SOURCE_DIR}/test_plugins ${CMAKE_CURRENT_BINARY_DIR}/test_plugins)

set(FIX ${CMAKE_CURRENT_SOURCE_DIR}/fixtures)
set(EXPECT ${CMAKE_CURRENT_SOURCE_DIR}/expect.sh)
set(WORK ${CMAKE_CURRENT_BINARY_DIR}/work)
set(BAD_PLUGINS --plugin-path ${CMAKE_BINARY_DIR}/test-plugins)
file(MAKE_DIRECTORY ${WORK})

# rig_cli_test(NAME EXIT_CODE REGEX [ONE_LINE] ARGS <rig arguments...>)
function(rig_cli_test name code regex)
  cmake_parse_arguments(ARG "ONE_LINE" "" "ARGS" ${ARGN})
  set(flags)
  if(ARG_ONE_LINE)
    set(flags --one-line)
  endif()
  add_test(NAME cli.${name}
    COMMAND bash ${EXPECT} ${code} ${regex} ${flags} --workdir ${WORK}/${name} --
            $<TARGET_FILE:rig_cli> ${ARG_ARGS})
  set_tests_properties(cli.${name} PROPERTIES LABELS integration TIMEOUT 180)
endfunction()

# Information commands.
rig_cli_test(version 0 "^rig [0-9]+\\.[0-9]+\\.[0-9]+ \\(plugin ABI [0-9]+. CUDA (on|off), MPI (on|off), NCCL (on|off)\\)" ARGS --version)
rig_cli_test(help 0 "validate +check an experiment in every mode" ARGS --help)
rig_cli_test(plugins_lists_all 0
  "model +mlp .*rig-model-mlp\\.so.*data_layer +synthetic.*optimizer +sgd.*lr_policy +fixed_lr.*communicator +local"
  ARGS plugins)
rig_cli_test(plugins_shows_broken 0 "model +not_elf +- +[^ ]*rig-model-not_elf\\.so +BROKEN: .*not a shared object" ARGS plugins ${BAD_PLUGINS})
add_test(NAME cli.plugins_columns
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/plugins_list.sh $<TARGET_FILE:rig_cli> ${BAD_PLUGINS})
set_tests_properties(cli.plugins_columns PROPERTIES LABELS integration TIMEOUT 60
  REQUIRED_FILES ${CMAKE_BINARY_DIR}/test-plugins/rig-model-throws.so)
rig_cli_test(schema_plugin 0 "hidden_sizes" ARGS schema model/mlp)
rig_cli_test(schema_experiment 0 "batch_size_per_gpu" ARGS schema experiment)
rig_cli_test(validate_ok 0 "infer mode: OK" ARGS validate ${FIX}/tiny.yaml)
# validate builds the plugins, so their own checks run, as rig run's would.
rig_cli_test(validate_reports_each_mode 0 "train mode: OK \\(model mlp, [0-9]+ parameters. data_layer synthetic, 256 samples an epoch. optimizer sgd. lr_policy fixed_lr over 40 steps"
  ARGS validate ${FIX}/tiny.yaml)
rig_cli_test(validate_runs_lr_policy_checks 2
  "train mode: lr_policy 'piecewise_constant' failed to start: .*sorted in increasing order"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml --lr_policy=piecewise_constant
  --set lr_policy_params.boundaries=[20,10] --set lr_policy_params.decay_rates=[0.1,0.01])
rig_cli_test(validate_runs_model_checks 2
  "train mode: model 'resnet' failed to start: .*does not say 'channels'"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml --model=resnet --set "model_params={depth: 20}")
rig_cli_test(validate_checks_train_eval 2
  "train_eval mode: train_eval trains and evaluates one model, so eval_params may not change it: model_params.hidden_sizes"
  ONE_LINE ARGS validate ${FIX}/eval_changes_model.yaml)
rig_cli_test(config_shows_plugin_defaults 0 "nesterov: false" ARGS config ${FIX}/tiny.yaml --mode train)
rig_cli_test(config_slash_override 0 "learning_rate: 0\\.5"
  ARGS config ${FIX}/tiny.yaml --lr_policy_params/learning_rate=0.5)
rig_cli_test(config_set_override 0 "momentum: 0\\.5"
  ARGS config ${FIX}/tiny.yaml --set optimizer_params.momentum=0.5)

# Bad input: exit 2 and one clear message.
rig_cli_test(bad_usage 2 "rig: error: .*" ARGS frobnicate)
rig_cli_test(missing_file 2 "no_such_experiment\\.yaml" ONE_LINE ARGS run no_such_experiment.yaml)
rig_cli_test(yaml_syntax_error 2 "syntax_error\\.yaml:[0-9]+:[0-9]+: .*" ONE_LINE
  ARGS validate ${FIX}/syntax_error.yaml)
rig_cli_test(alias_bomb 2 "alias_bomb\\.yaml: the YAML expands to more than 100000 nodes"
  ONE_LINE ARGS validate ${FIX}/alias_bomb.yaml)
set_tests_properties(cli.alias_bomb PROPERTIES TIMEOUT 5)
rig_cli_test(unknown_key 2 "unknown_key\\.yaml:3:3: base_params\\.max_step: unknown key. did you mean 'max_steps'\\?"
  ONE_LINE ARGS validate ${FIX}/unknown_key.yaml)
rig_cli_test(unknown_section 2 "unknown_section\\.yaml:9:1: .*trian_params.*did you mean 'train_params'"
  ONE_LINE ARGS validate ${FIX}/unknown_section.yaml)
rig_cli_test(wrong_type 2 "wrong_type\\.yaml:3:14: base_params\\.max_steps: expected integer, found 'abc'"
  ONE_LINE ARGS validate ${FIX}/wrong_type.yaml)
rig_cli_test(missing_required_key 2 "missing_model\\.yaml.*missing required key 'model'"
  ONE_LINE ARGS validate ${FIX}/missing_model.yaml)
rig_cli_test(unknown_plugin 2 "unknown_plugin\\.yaml:4:10: base_params\\.model: unknown model plugin 'mpl'. did you mean 'mlp'\\? \\(known model plugins: mlp"
  ONE_LINE ARGS validate ${FIX}/unknown_plugin.yaml)
rig_cli_test(wrong_kind 2 "wrong_kind\\.yaml:6:14: base_params\\.optimizer: 'mlp' is a model plugin, not an optimizer plugin"
  ONE_LINE ARGS validate ${FIX}/wrong_kind.yaml)
rig_cli_test(bad_plugin_param 2 "bad_plugin_param\\.yaml:6:5: base_params\\.model_params\\.hiden_sizes: unknown key for model 'mlp'. did you mean 'hidden_sizes'\\?"
  ONE_LINE ARGS validate ${FIX}/bad_plugin_param.yaml)
rig_cli_test(bad_override_key 2 "command line.*learnin_rate.*did you mean 'learning_rate'"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml --lr_policy_params/learnin_rate=0.5)
rig_cli_test(bad_override_type 2 "command line.*max_steps: expected integer, found 'many'"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml --max_steps=many)
rig_cli_test(both_max_steps_and_num_epochs 2 "both_step_keys\\.yaml.*max_steps.*num_epochs"
  ONE_LINE ARGS run ${FIX}/both_step_keys.yaml)
rig_cli_test(wrong_abi 2 "built for rig plugin ABI version 999, but this rig uses ABI version [0-9]+"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml ${BAD_PLUGINS} --model=wrong_abi)
rig_cli_test(not_a_shared_object 2 "rig-model-not_elf\\.so is not a shared object"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml ${BAD_PLUGINS} --model=not_elf)
rig_cli_test(no_descriptor 2 "rig-model-no_descriptor\\.so is a shared object but not a rig plugin"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml ${BAD_PLUGINS} --model=no_descriptor)
rig_cli_test(plugin_missing_library 2
  "cannot load plugin .*rig-model-missing_dependency\\.so: librig_test_unreachable\\.so: cannot open shared object file"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml ${BAD_PLUGINS} --model=missing_dependency)
rig_cli_test(plugin_by_path 2 "is not a shared object"
  ONE_LINE ARGS validate ${FIX}/tiny.yaml --model=${CMAKE_BINARY_DIR}/test-plugins/rig-model-not_elf.so)
rig_cli_test(factory_throws 2 "model 'throws' failed to start: vocabulary file /nonexistent/vocab\\.txt not found"
  ONE_LINE ARGS run ${FIX}/throwing_model.yaml ${BAD_PLUGINS} --logdir runs/throws)
rig_cli_test(eval_without_checkpoint 2 "eval mode needs a trained model.*holds no checkpoint"
  ONE_LINE ARGS run ${FIX}/tiny.yaml --mode eval --logdir runs/never_trained)
rig_cli_test(continue_without_checkpoint 2 "--continue_learning: .* holds no checkpoint"
  ONE_LINE ARGS run ${FIX}/tiny.yaml --continue_learning --logdir runs/never_trained)
rig_cli_test(missed_target_loss 1 "FAILED: final train loss .* is not below target_loss 0\\.01"
  ARGS run ${FIX}/missed_target.yaml --logdir runs/missed_target)
set_tests_properties(cli.wrong_abi cli.not_a_shared_object cli.no_descriptor cli.plugin_by_path
  cli.factory_throws cli.plugins_shows_broken PROPERTIES REQUIRED_FILES ${CMAKE_BINARY_DIR}/test-plugins/rig-model-throws.so)

# Good runs: the smoke experiment, and a train -> resume -> eval -> infer round trip.
rig_cli_test(smoke_trains 0 "Final train loss [0-9.]+ is below target_loss"
  ARGS run ${PROJECT_SOURCE_DIR}/experiments/smoke.yaml --logdir runs/smoke)
add_test(NAME cli.lifecycle
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lifecycle.sh $<TARGET_FILE:rig_cli> ${FIX}/tiny.yaml ${WORK}/lifecycle)
set_tests_properties(cli.lifecycle PROPERTIES LABELS integration TIMEOUT 300)
add_test(NAME cli.engine_features
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/engine_features.sh $<TARGET_FILE:rig_cli> ${FIX}/tiny.yaml ${WORK}/engine_features)
set_tests_properties(cli.engine_features PROPERTIES LABELS integration TIMEOUT 300)
add_test(NAME cli.tensorboard_reads
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tensorboard_reads.sh $<TARGET_FILE:rig_cli>
          $<TARGET_FILE:rig_unit_tests> ${FIX}/tiny.yaml ${WORK}/tensorboard_reads)
set_tests_properties(cli.tensorboard_reads PROPERTIES LABELS integration TIMEOUT 300 SKIP_RETURN_CODE 77)
# `rig bleu`: its output and errors, then a live cross-check against the sacrebleu command.
set(BLEU_FIX ${PROJECT_SOURCE_DIR}/tests/unit/fixtures/bleu)
add_test(NAME cli.bleu
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bleu.sh $<TARGET_FILE:rig_cli> ${BLEU_FIX} ${WORK}/bleu)
set_tests_properties(cli.bleu PROPERTIES LABELS integration TIMEOUT 180)
add_test(NAME cli.bleu_matches_sacrebleu
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bleu.sh $<TARGET_FILE:rig_cli> ${BLEU_FIX}
          ${WORK}/bleu_matches_sacrebleu --sacrebleu)
set_tests_properties(cli.bleu_matches_sacrebleu PROPERTIES LABELS integration TIMEOUT 300
  SKIP_RETURN_CODE 77)
add_test(NAME cli.checkpoints
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/checkpoints.sh $<TARGET_FILE:rig_cli> ${FIX}/tiny.yaml ${WORK}/checkpoints)
set_tests_properties(cli.checkpoints PROPERTIES LABELS integration TIMEOUT 300)
add_test(NAME cli.image_data
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/image_data.sh $<TARGET_FILE:rig_cli> ${WORK}/image_data)
set_tests_properties(cli.image_data PROPERTIES LABELS integration TIMEOUT 300)
# The image default experiment on a slice of Debian's Fashion-MNIST (tools/install-deps installs it).
rig_cli_test(fashion_mnist_experiment 0 "Validation Acc@1: [0-9.]+"
  ARGS run ${PROJECT_SOURCE_DIR}/experiments/fashion-mnist-resnet20.yaml --mode train_eval
       --logdir runs/fashion_mnist --num_epochs=1 --set data_layer_params.limit=512
       --batch_size_per_gpu=64 --eval_steps=1000 --save_checkpoint_steps=0)
set_tests_properties(cli.fashion_mnist_experiment PROPERTIES
  REQUIRED_FILES /usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz)
# image_folder end to end: generated JPEG folders, a tiny ResNet trained,
# evaluated and resumed through the real binary; corrupt and empty inputs.
if(TARGET PkgConfig::RIG_TURBOJPEG AND TARGET rig-data_layer-image_folder AND TARGET rig-model-resnet)
  add_executable(rig_make_jpeg_tree make_jpeg_tree.cpp)
  target_include_directories(rig_make_jpeg_tree PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_compile_options(rig_make_jpeg_tree PRIVATE ${RIG_WARNINGS})
  target_link_libraries(rig_make_jpeg_tree PRIVATE PkgConfig::RIG_TURBOJPEG)
  add_test(NAME cli.image_folder
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/image_folder.sh $<TARGET_FILE:rig_cli>
            $<TARGET_FILE:rig_make_jpeg_tree> ${WORK}/image_folder)
  set_tests_properties(cli.image_folder PROPERTIES LABELS integration TIMEOUT 300)
endif()
# The text2text data layers (parallel_text, synthetic_text) through the binary:
# every bad input exits 2 with one line naming the file.
add_test(NAME cli.text_data
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/text_data.sh $<TARGET_FILE:rig_cli> ${WORK}/text_data)
set_tests_properties(cli.text_data PROPERTIES LABELS integration TIMEOUT 300)
# Translation end to end: a tiny transformer learns a generated dictionary
# language from parallel_text files; BLEU and its files, infer,
# interactive_infer, best checkpoint by BLEU, bit-exact mid-epoch resume, bad
# files. Skipped (77) without spm_train.
if(TARGET rig-data_layer-parallel_text AND TARGET rig-model-transformer)
  add_test(NAME cli.translation
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/translation.sh $<TARGET_FILE:rig_cli> ${WORK}/translation)
  set_tests_properties(cli.translation PROPERTIES LABELS integration TIMEOUT 300
    SKIP_RETURN_CODE 77)
endif()
# tools/prepare-de-en's program on a small generated dictionary: the corpus
# layout, the split, determinism, both directions, bad input, the baselines.
add_test(NAME cli.prepare_de_en
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/prepare_de_en.sh $<TARGET_FILE:rig-prepare-text>
          $<TARGET_FILE:rig_cli> ${WORK}/prepare_de_en)
set_tests_properties(cli.prepare_de_en PROPERTIES LABELS integration TIMEOUT 300)
# Every committed experiment validates in every mode (schema, plugin parameters, engine rules).
file(GLOB RIG_EXPERIMENTS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/experiments/*.yaml)
foreach(experiment ${RIG_EXPERIMENTS})
  get_filename_component(name ${experiment} NAME_WE)
  # Most shipped experiments' data is not on a test machine: their plugins
  # that need no data are built; smoke's and Fashion-MNIST's are built whole.
  if(name STREQUAL "smoke" OR name STREQUAL "fashion-mnist-resnet20")
    rig_cli_test(validates_${name} 0 "infer mode: OK \\(model" ARGS validate ${experiment})
  else()
    rig_cli_test(validates_${name} 0 "train mode: OK \\(data_layer, model and optimizer not built"
      ARGS validate ${experiment} --skip-data)
  endif()
endforeach()
# Data-parallel training across two "hosts": network namespaces joined by a
# veth link capped with tc (tools/two-hosts), mpirun across them. Needs root
# (skips, 77, otherwise); Open MPI's leaks at exit fail ASan runs (no_sanitize).
if(TARGET rig-communicator-mpi)
  add_test(NAME cli.two_hosts
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/two_hosts.sh $<TARGET_FILE:rig_cli>
            ${PROJECT_SOURCE_DIR}/tools/two-hosts ${WORK}/two_hosts)
  set_tests_properties(cli.two_hosts PROPERTIES LABELS "integration;mpi;root;no_sanitize"
    TIMEOUT 180 SKIP_RETURN_CODE 77)
endif()
# Data-parallel training on the mpi communicator: 2 ranks against iter_size 2,
# resume, eval / infer across ranks, disagreeing ranks, a killed rank.
if(TARGET rig-communicator-mpi)
  add_test(NAME cli.data_parallel
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/data_parallel.sh $<TARGET_FILE:rig_cli> ${FIX}/tiny.yaml
            ${WORK}/data_parallel)
  set_tests_properties(cli.data_parallel PROPERTIES LABELS "integration;mpi;no_sanitize"
    TIMEOUT 300 SKIP_RETURN_CODE 77)
  # `rig run --elastic` (elastic.sh): a killed rank resumed on fewer ranks with
  # the same bytes, a kill inside a checkpoint write, --min-nproc,
  # --max-restarts, SIGTERM and resume, bad flags.
  add_test(NAME cli.elastic
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic.sh $<TARGET_FILE:rig_cli> ${FIX}/tiny.yaml
            ${WORK}/elastic)
  set_tests_properties(cli.elastic PROPERTIES LABELS "integration;mpi;no_sanitize"
    TIMEOUT 400 SKIP_RETURN_CODE 77)
  # Host b of tools/two-hosts cut off mid-run (root): left out, the job ends on
  # host a with the bytes of an uninterrupted run (elastic_two_hosts.sh).
  add_test(NAME cli.elastic_two_hosts
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic_two_hosts.sh $<TARGET_FILE:rig_cli>
            ${PROJECT_SOURCE_DIR}/tools/two-hosts ${WORK}/elastic_two_hosts)
  set_tests_properties(cli.elastic_two_hosts PROPERTIES LABELS "integration;mpi;root;no_sanitize"
    TIMEOUT 300 SKIP_RETURN_CODE 77)
  # A real one-machine Slurm (root; Debian's slurm-wlm and munge, started and
  # stopped by slurm.sh): srun -n 2, a preemption with scancel --signal=TERM and
  # its resume, and rig run --elastic as an sbatch job stopped by Slurm's SIGTERM.
  add_test(NAME cli.slurm
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm.sh $<TARGET_FILE:rig_cli> ${WORK}/slurm)
  set_tests_properties(cli.slurm PROPERTIES LABELS "integration;mpi;root;no_sanitize"
    TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()
# Parameter-server training on the mpi_ps communicator: synchronous runs
# against iter_size W, resume across S and onto mpi, staleness, 2-bit
# compression, a straggler, a killed server, refusals.
if(TARGET rig-communicator-mpi_ps)
  add_test(NAME cli.parameter_server
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/parameter_server.sh $<TARGET_FILE:rig_cli>
            ${FIX}/tiny.yaml ${WORK}/parameter_server)
  set_tests_properties(cli.parameter_server PROPERTIES LABELS "integration;mpi;no_sanitize"
    TIMEOUT 600 SKIP_RETURN_CODE 77)
  # Convergence on Fashion-MNIST (ps_convergence.sh): 3 seeds x synchronous /
  # asynchronous on 2 workers + 1 server (ResNet-8, 300 steps), async within 1
  # point of sync, no nan / inf; 2 to 3 minutes, alone (staleness and time grow
  # beside other tests).
  add_test(NAME cli.ps_convergence
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ps_convergence.sh $<TARGET_FILE:rig_cli>
            ${WORK}/ps_convergence ${FIX}/ps-fashion-mnist.yaml)
  set_tests_properties(cli.ps_convergence PROPERTIES LABELS "integration;mpi;no_sanitize"
    TIMEOUT 400 SKIP_RETURN_CODE 77 RUN_SERIAL TRUE)
  # The link between a worker and its server taken down (tools/two-hosts,
  # root): the worker names the server within timeout_s and ends.
  add_test(NAME cli.ps_link_down
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/ps_link_down.sh $<TARGET_FILE:rig_cli>
            ${PROJECT_SOURCE_DIR}/tools/two-hosts ${WORK}/ps_link_down)
  set_tests_properties(cli.ps_link_down PROPERTIES LABELS "integration;mpi;root;no_sanitize"
    TIMEOUT 120 SKIP_RETURN_CODE 77)
endif()
# tools/pack: the relocatable bundle, extracted into a fresh folder and moved,
# trains the smoke experiment with an empty environment; ldd resolves inside
# it; rig-bundle-check; bad input (docs/bundle.md). pack refuses sanitizer builds.
add_test(NAME cli.bundle
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/bundle.sh ${PROJECT_SOURCE_DIR}/tools/pack ${CMAKE_BINARY_DIR}
          ${WORK}/bundle)
set_tests_properties(cli.bundle PROPERTIES LABELS "integration;no_sanitize" TIMEOUT 300)
# The build's optional parts: AUTO, ON (required) or OFF (optional_parts.sh).
add_test(NAME build.optional_parts
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/optional_parts.sh ${PROJECT_SOURCE_DIR}
          ${WORK}/optional_parts)
set_tests_properties(build.optional_parts PROPERTIES LABELS "integration;no_sanitize" TIMEOUT 300)

# tools/gpu-check on a machine without a GPU: pack, run, exit 3 with the reason (gpu_check.sh).
add_test(NAME cli.gpu_check
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpu_check.sh ${PROJECT_SOURCE_DIR}/tools/gpu-check
          ${CMAKE_BINARY_DIR} ${WORK}/gpu_check)
set_tests_properties(cli.gpu_check PROPERTIES LABELS "integration;no_sanitize" TIMEOUT 600)
