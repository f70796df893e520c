// The optim API in one include: optimizers, LR schedulers, gradient clipping.
#pragma once
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
