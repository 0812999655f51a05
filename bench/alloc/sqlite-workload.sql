-- sqlite workload for bench/alloc/run: ~300k rows built by a recursive CTE, an index, and
-- aggregate queries. Run as `sqlite3 :memory: < sqlite-workload.sql`; the output must be the same
-- under every allocator.
PRAGMA cache_size = -200000;
CREATE TABLE item(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, payload TEXT, value REAL);
WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 300000)
INSERT INTO item(id, grp, name, payload, value)
SELECT n, (n * 7919) % 1000, printf('name-%08d', (n * 104729) % 300007),
       substr(hex(zeroblob(40 + (n * 31) % 400)), 1, 20 + (n * 17) % 700),
       ((n * 2654435761) % 1000003) / 1000.0
FROM seq;
CREATE INDEX item_name ON item(name);
CREATE INDEX item_grp_value ON item(grp, value);
SELECT count(*), sum(length(payload)), round(sum(value), 3) FROM item;
SELECT grp, count(*), round(avg(value), 3), max(name) FROM item GROUP BY grp ORDER BY grp LIMIT 5;
SELECT count(DISTINCT substr(name, 1, 9)) FROM item;
SELECT name, length(payload) FROM item WHERE name BETWEEN 'name-00100000' AND 'name-00100050' ORDER BY name;
SELECT a.grp, count(*), round(sum(b.value - a.value), 3) FROM item a JOIN item b ON b.id = a.id - 1 GROUP BY a.grp ORDER BY 3 DESC, 1 LIMIT 3;
SELECT group_concat(grp, ',') FROM (SELECT grp FROM item GROUP BY grp HAVING sum(value) > 150000 ORDER BY grp LIMIT 20);
UPDATE item SET payload = payload || payload WHERE id % 3 = 0;
DELETE FROM item WHERE id % 5 = 0;
SELECT count(*), sum(length(payload)) FROM item;
