"""Deciding: demand and its forecast, the planner (solvers, rules, explanations), solving a
snapshot into a plan, review of a stored plan, predictions. Pure: data in, a plan out."""
