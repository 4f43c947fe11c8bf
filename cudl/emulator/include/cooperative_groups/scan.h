// cudl emulator: inclusive_scan / exclusive_scan live in cooperative_groups.h
#pragma once
#include "../cooperative_groups.h"
