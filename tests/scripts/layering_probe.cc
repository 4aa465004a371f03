// Compiled to fail (ctest layering_build_rejects_upward_include): a source of the util layer
// that includes a header of the kv layer. The first include is allowed and must resolve; the
// second must not, because larql_util's include path is build/include/util/ only.
#include "util/error.h"
#include "kv/engine.h"
