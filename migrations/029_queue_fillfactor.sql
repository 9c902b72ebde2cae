-- The hot generations leave half of each page free (fill factor 50, was
-- 80). The claim rewrites each row it leases and the completion again:
-- with a fifth of the page free, most new versions did not fit beside
-- the old one, and an update whose new version goes to another page
-- writes a second tuple lock to the WAL (the old version is marked locked
-- while the page is left) and touches a second page: three rows in four
-- left their page in a drain. With half free, one in four (the claim's
-- versions fit beside the old ones, and a page's dead versions are pruned
-- in place before the completion's when no snapshot needs them). In the
-- in-server replay the
-- drain wrote 1,582 WAL bytes a row before and 1,471 after, in the same
-- time (docs/architecture.md, "Measured in the server"); a hot generation
-- takes about 1.6 times the pages, and leaves by truncation as before.
-- Only pages written from now on are filled less: nothing is rewritten.
ALTER TABLE {{.schema}}.queue_g1 SET (fillfactor = 50);
ALTER TABLE {{.schema}}.queue_g2 SET (fillfactor = 50);
ALTER TABLE {{.schema}}.queue_g3 SET (fillfactor = 50);
