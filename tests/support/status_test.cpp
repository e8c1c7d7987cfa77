#include <gtest/gtest.h>
#include "provider_map/status.h"
TEST(Status, NamesItsKind) { EXPECT_EQ(moezip::Status::timeout("x").to_string(), "timeout: x"); }
