// placeholder, replaced by the interposition shims
#include "preload/engine_api.h"
