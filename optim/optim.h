// The optim API in one include: optimizers, LR schedulers, gradient clipping, loss scaling, early
// stopping.
#pragma once
#include "optim/clip.h"
#include "optim/early_stopping.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"
#include "optim/scheduler.h"
