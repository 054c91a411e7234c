// Lets a fuzz target #include a plugin's .cpp to reach the readers in its
// anonymous namespace, without the plugin's descriptor: RIG_PLUGIN expands to
// nothing, so nothing links librig (the layer class is never instantiated).
#pragma once

#include "rig/plugin.hpp"

#undef RIG_PLUGIN
#define RIG_PLUGIN(KIND, NAME, VERSION, SUMMARY, CLASS)
