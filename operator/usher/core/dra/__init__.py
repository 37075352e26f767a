"""Dynamic Resource Allocation: models, allocator and CEL device selectors. Pure."""
