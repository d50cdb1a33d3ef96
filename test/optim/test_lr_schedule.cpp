// The MLPerf DLRM learning-rate schedule against hand-computed values.
#include <catch2/catch.hpp>
#include <cmath>

#include "engine/core/error.h"
#include "engine/optim/lr_schedule.h"

using namespace shardrec;

TEST_CASE("lr schedule: constant without warmup or decay", "[optim]") {
    LrScheduleConfig c;
    c.base_lr = 0.5f;
    CHECK(lr_at(c, 0) == 0.5f);
    CHECK(lr_at(c, 1000000) == 0.5f);
}

TEST_CASE("lr schedule: warmup, plateau, quadratic decay, floor", "[optim]") {
    LrScheduleConfig c;
    c.base_lr = 2.0f;
    c.warmup_steps = 4;
    c.decay_start_step = 10;
    c.decay_steps = 4;
    c.decay_power = 2.0f;
    c.end_lr_factor = 0.25f;     // end = 0.5
    CHECK(lr_at(c, 0) == 0.0f);  // linear warmup from 0
    CHECK(lr_at(c, 1) == 0.5f);
    CHECK(lr_at(c, 3) == 1.5f);
    CHECK(lr_at(c, 4) == 2.0f);
    CHECK(lr_at(c, 9) == 2.0f);
    CHECK(lr_at(c, 10) == 2.0f);  // t = 0: full base
    // t = 1: 0.5 + 1.5 * (3/4)^2 = 1.34375; t = 2: 0.5 + 1.5 / 4 = 0.875; t = 3: 0.59375
    CHECK(lr_at(c, 11) == 1.34375f);
    CHECK(lr_at(c, 12) == 0.875f);
    CHECK(lr_at(c, 13) == 0.59375f);
    CHECK(lr_at(c, 14) == 0.5f);
    CHECK(lr_at(c, 100) == 0.5f);
}

TEST_CASE("lr schedule: linear decay to zero (power 1, MLPerf end)", "[optim]") {
    LrScheduleConfig c;
    c.base_lr = 1.0f;
    c.decay_start_step = 0;
    c.decay_steps = 8;
    c.decay_power = 1.0f;
    CHECK(lr_at(c, 2) == 0.75f);
    CHECK(lr_at(c, 8) == 0.0f);
}

TEST_CASE("lr schedule: invalid settings throw", "[optim]") {
    LrScheduleConfig c;
    CHECK_THROWS_AS(lr_at(c, -1), Error);
    c.decay_power = 0.f;
    CHECK_THROWS_AS(lr_at(c, 0), Error);
    c.decay_power = 2.f;
    c.end_lr_factor = 1.5f;
    CHECK_THROWS_AS(lr_at(c, 0), Error);
}
