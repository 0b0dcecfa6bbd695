"""Time: seconds of kernels, collectives, schedules and whole steps. Imports account.counting and account.memory."""
