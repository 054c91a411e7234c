// A library that the missing_dependency plugin needs but the loader cannot
// find (it lives outside every search path and the plugin has no RPATH to it).
extern "C" int rig_test_unreachable_value() {
  return 7;
}
