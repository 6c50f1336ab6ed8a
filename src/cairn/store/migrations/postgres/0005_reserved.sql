-- Number 5 belongs to another branch's migration (it restructures the steps
-- row). This file only keeps the numbers 1..n without a gap on the branch that
-- adds number 6, which does not depend on it: the merge replaces this file with
-- that migration (delete this one, keep the other).
SELECT 1;
