// Plugins build with hidden visibility; types shared across the plugin
// boundary (interfaces, errors) keep one identity in every shared object.
#pragma once

#define RIG_API __attribute__((visibility("default")))
