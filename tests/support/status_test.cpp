#include <gtest/gtest.h>
#include "coordinator/base/status.h"
TEST(Status, NamesItsKind) { EXPECT_EQ(moezip::Status::timeout("x").to_string(), "timeout: x"); }
