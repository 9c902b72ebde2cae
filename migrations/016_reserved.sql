-- Placeholder for the isolation branch's 016 migration, on this branch only,
-- so 017 can be applied in order; it is dropped when the branch is merged.
SELECT 1;
