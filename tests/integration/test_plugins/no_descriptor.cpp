// A valid shared object that is not a rig plugin.
extern "C" int rig_test_not_a_plugin() {
  return 42;
}
