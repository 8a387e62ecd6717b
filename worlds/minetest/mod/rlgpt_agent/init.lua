-- The agent's body in a headless Minetest server, driven over a loopback socket.
--
-- There is no headless player in Minetest, so the body is ours: a position on the node
-- grid (feet; the head is the node above) and a facing among the four compass
-- directions. What it can do follows the game's own rules: digging asks
-- minetest.get_dig_params with the tools it carries and minetest.get_node_drops,
-- crafting and smelting ask minetest.get_craft_result. Nothing here lets the agent see
-- beyond its voxel window or move anything but itself: no find, teleport or give.
--
-- Python listens on 127.0.0.1 and this mod connects to it (the port is in the setting
-- rlgpt_agent.port). One request is a JSON line; one reply is a JSON line, followed by
-- the voxel window as raw bytes when the reply says so. Requests are served in a loop
-- inside one globalstep, for up to BUDGET seconds, because one exchange per server step
-- would cap the rate at the server's step rate. When the socket closes the server shuts
-- down: the owner is gone, and nobody else may drive this world.

local ie = minetest.request_insecure_environment()
assert(ie, "rlgpt_agent must be listed in secure.trusted_mods")
-- socket.core is the C half of lua-socket: it needs no `require` inside the sandbox,
-- unlike socket.lua.
local socket = ie.require("socket.core")

local PORT = tonumber(minetest.settings:get("rlgpt_agent.port"))
-- How long one globalstep may serve requests before the server gets to do its own work
-- (emerging blocks); a request arriving later waits for the next globalstep.
local BUDGET = 0.05
-- Blocks are kept generated this far beyond the voxel window, so that a fall or a few
-- steps never reach ungenerated ground.
local MARGIN = 16
-- A Minetest day lasts 20 minutes at the default time_speed (72); one step stands for
-- one second of it. time_speed is 0 so that only steps move the clock.
local DAY_STEPS = 1200
local START_TIME = 0.25 -- sunrise: the time a new Minetest world starts at
local HP_MAX = minetest.PLAYER_MAX_HP_DEFAULT or 20
local BREATH_MAX = minetest.PLAYER_MAX_BREATH_DEFAULT or 10
-- Falls up to this many nodes do no harm, each node beyond costs one HP (Minecraft's rule;
-- Minetest's own depends on the speed at impact, which a body on the grid does not have).
local SAFE_FALL = 3
local INV_SIZE = 32 -- a player's main inventory in minetest_game
local REACH = 2 -- a furnace within this many nodes of the body can be used

-- Facing: 0 north (+z), 1 east (+x), 2 south (-z), 3 west (-x): also the furnace's facedir.
local DIRS = {[0] = {x = 0, z = 1}, {x = 1, z = 0}, {x = 0, z = -1}, {x = -1, z = 0}}

local conn = nil
local pending = false -- a reply waits for an emerge to finish
local body = nil
local inv = minetest.create_detached_inventory("rlgpt_body", {})
inv:set_size("main", INV_SIZE)
local generated = {} -- "x,y,z" chunk coordinates → true: every mapchunk asked for
local buffer = {}

-- Nodes and items ---------------------------------------------------------------------

local function ndef(name)
	return minetest.registered_nodes[name]
end

local function node_name(p)
	return minetest.get_node(p).name
end

-- Unknown nodes and "ignore" (not generated) count as solid: the body never enters them.
local function walkable(name)
	local d = ndef(name)
	return name == "ignore" or d == nil or d.walkable ~= false
end

local function liquid(name)
	local d = ndef(name)
	return d ~= nil and d.liquidtype ~= nil and d.liquidtype ~= "none"
end

local function climbable(name)
	local d = ndef(name)
	return d ~= nil and d.climbable == true
end

local function offset(p, dx, dy, dz)
	return {x = p.x + dx, y = p.y + dy, z = p.z + dz}
end

local function front(dy)
	local d = DIRS[body.dir]
	return offset(body.pos, d.x, dy, d.z)
end

local function counts()
	local out = {}
	for _, stack in ipairs(inv:get_list("main")) do
		if not stack:is_empty() then
			local name = stack:get_name()
			out[name] = (out[name] or 0) + stack:get_count()
		end
	end
	return out
end

-- Whether item `name` satisfies a recipe ingredient ("default:tree" or "group:wood").
local function matches(name, want)
	if want:sub(1, 6) ~= "group:" then
		return name == want
	end
	local def = minetest.registered_items[name]
	if not def or not def.groups then
		return false
	end
	for group in want:sub(7):gmatch("[^,]+") do
		if (def.groups[group] or 0) == 0 then
			return false
		end
	end
	return true
end

-- Digging with a sequence of actions must give the same drops every time: random drops
-- (saplings from leaves, flint from gravel) draw from math.random, reseeded from the
-- episode's seed and step before each dig.
local function reseed()
	math.randomseed((body.seed * 1000003 + body.steps) % 2147483647)
end

-- Movement -----------------------------------------------------------------------------

local function free_at(p)
	return not walkable(node_name(p)) and not walkable(node_name(offset(p, 0, 1, 0)))
end

-- Let the body fall until it stands on something, floats in a liquid or holds a ladder.
-- Returns true when it stopped above ground not generated yet (the caller emerges more
-- and settles again).
local function settle()
	while true do
		local feet = node_name(body.pos)
		if liquid(feet) or climbable(feet) then
			body.fall = 0
			return false
		end
		local below = node_name(offset(body.pos, 0, -1, 0))
		if below == "ignore" then
			return true
		end
		if walkable(below) then
			-- The spawn level lies above the ground: landing there at a reset hurts nobody.
			if body.fall > SAFE_FALL and body.steps > 0 then
				body.hp = body.hp - (body.fall - SAFE_FALL)
			end
			body.fall = 0
			return false
		end
		body.pos.y = body.pos.y - 1
		body.fall = body.fall + 1
	end
end

-- Nodes of group falling_node (sand, gravel) above an emptied node drop at once, as the
-- game drops them, but without the real-time falling entity.
local function drop_column(p)
	local above = offset(p, 0, 1, 0)
	local node = minetest.get_node(above)
	local def = ndef(node.name)
	if not def or (def.groups and (def.groups.falling_node or 0) or 0) == 0 then
		return
	end
	local land = p
	while not walkable(node_name(offset(land, 0, -1, 0))) and node_name(offset(land, 0, -1, 0)) ~= "ignore" do
		land = offset(land, 0, -1, 0)
	end
	minetest.remove_node(above)
	minetest.set_node(land, node)
	drop_column(above)
end

local function move(sign)
	local d = DIRS[body.dir]
	local target = offset(body.pos, sign * d.x, 0, sign * d.z)
	if not free_at(target) then
		return "blocked"
	end
	body.pos = target
	return "moved"
end

-- Up one node onto the node in front (from the ground, or out of a liquid onto its
-- shore); in a liquid with nothing to climb onto, swim up one node.
local function jump()
	local swimming = liquid(node_name(body.pos))
	if not swimming and not walkable(node_name(offset(body.pos, 0, -1, 0))) then
		return "not standing"
	end
	if walkable(node_name(offset(body.pos, 0, 2, 0))) then
		return "blocked"
	end
	local target = front(1)
	if free_at(target) then
		body.pos = target
		return "jumped"
	end
	if swimming then
		body.pos = offset(body.pos, 0, 1, 0)
		return "swam"
	end
	return "blocked"
end

-- Digging, placing, crafting, smelting ---------------------------------------------------

-- A tool's rank: the highest level of node it digs in any group (wood and stone pickaxes
-- 1, steel 2, diamond 3), then how many ratings of its groups it digs at all (the wooden
-- pickaxe only cracky 3, the stone one also cracky 2: iron ore).
local function rank(caps)
	local top, ratings = 0, 0
	for _, cap in pairs(caps.groupcaps or {}) do
		top = math.max(top, cap.maxlevel or 0)
		for _ in pairs(cap.times or {}) do
			ratings = ratings + 1
		end
	end
	return top * 1000 + ratings
end

-- The carried tool a player would wield to dig `groups`: the hand where it digs, else the
-- lowest-ranked tool that digs it (sparing the better one for what only it digs), the
-- fastest among those; nil for the hand.
local function best_tool(groups)
	local hand = ItemStack(""):get_tool_capabilities()
	local best = {index = nil, params = minetest.get_dig_params(groups, hand), rank = -1}
	for index, stack in ipairs(inv:get_list("main")) do
		local idef = stack:get_definition()
		if not stack:is_empty() and idef and idef.tool_capabilities then
			local caps = stack:get_tool_capabilities()
			local params = minetest.get_dig_params(groups, caps, stack:get_wear())
			local r = rank(caps)
			local better = not best.params.diggable
				or (best.index ~= nil and (r < best.rank or (r == best.rank and params.time < best.params.time)))
			if params.diggable and better then
				best = {index = index, params = params, rank = r}
			end
		end
	end
	return best
end

local function dig(p)
	local node = minetest.get_node(p)
	local def = ndef(node.name)
	if node.name == "air" or node.name == "ignore" or not def or liquid(node.name) then
		return "nothing to dig"
	end
	if def.diggable == false then
		return "not diggable"
	end
	if def.can_dig then
		local ok, allowed = pcall(def.can_dig, p, nil)
		if not ok or not allowed then
			return "not diggable"
		end
	end
	local tool = best_tool(def.groups or {})
	if not tool.params.diggable then
		return "needs a better tool"
	end
	local stack = tool.index and inv:get_stack("main", tool.index) or ItemStack("")
	reseed()
	local drops = minetest.get_node_drops(node, stack:get_name())
	for _, item in ipairs(drops) do
		if not inv:room_for_item("main", item) then
			return "inventory full"
		end
	end
	if tool.index then
		stack:add_wear(tool.params.wear)
		inv:set_stack("main", tool.index, stack)
	end
	minetest.remove_node(p)
	drop_column(p)
	for _, item in ipairs(drops) do
		inv:add_item("main", item)
	end
	return "dug " .. node.name
end

local function place(item)
	local def = ndef(item)
	if not def then
		return "not a node"
	end
	if not inv:contains_item("main", item) then
		return "not carried"
	end
	local p = front(0)
	local here = ndef(node_name(p))
	if not here or not here.buildable_to then
		return "blocked"
	end
	minetest.set_node(p, {name = item, param2 = (body.dir + 2) % 4})
	inv:remove_item("main", item)
	local below = offset(p, 0, -1, 0)
	if not walkable(node_name(below)) and node_name(below) ~= "ignore" then
		drop_column(below)
	end
	return "placed " .. item
end

-- Fill a recipe's ingredient list from the inventory: for each ingredient the first item
-- (by name) that matches it and is still available. Returns the grid and the items used.
local function fill(items, size)
	local have = counts()
	local names = {}
	for name in pairs(have) do
		names[#names + 1] = name
	end
	table.sort(names)
	local grid, used = {}, {}
	for i = 1, size do
		local want = items[i]
		if want == nil or want == "" then
			grid[i] = ""
		else
			local found = nil
			for _, name in ipairs(names) do
				if have[name] > 0 and matches(name, want) then
					found = name
					break
				end
			end
			if not found then
				return nil
			end
			have[found] = have[found] - 1
			used[#used + 1] = found
			grid[i] = found
		end
	end
	return grid, used
end

local function craft(item)
	for _, recipe in ipairs(minetest.get_all_craft_recipes(item) or {}) do
		if recipe.method == "normal" then
			local width = recipe.width > 0 and recipe.width or 3
			local size = 0
			for i in pairs(recipe.items) do
				size = math.max(size, i)
			end
			size = math.ceil(size / width) * width
			local grid, used = fill(recipe.items, size)
			if grid then
				local out = minetest.get_craft_result({method = "normal", width = width, items = grid})
				if not out.item:is_empty() and out.item:get_name() == item then
					for _, name in ipairs(used) do
						inv:remove_item("main", name)
					end
					if not inv:room_for_item("main", out.item) then
						for _, name in ipairs(used) do
							inv:add_item("main", name)
						end
						return "inventory full"
					end
					inv:add_item("main", out.item)
					for _, rest in ipairs(out.replacements or {}) do
						inv:add_item("main", rest)
					end
					return "crafted " .. out.item:to_string()
				end
			end
		end
	end
	return "no recipe fits"
end

-- Burn time of one `name` as furnace fuel (0 when it does not burn). Tools are never
-- taken as fuel: the agent would burn the pickaxe it needs.
local function burn_time(name)
	local idef = minetest.registered_items[name]
	if idef and idef.tool_capabilities then
		return 0
	end
	local out = minetest.get_craft_result({method = "fuel", width = 1, items = {name}})
	return out.time or 0
end

-- Smelt one `item` in a furnace near the body. Fuel burns as in the game's furnace:
-- a fuel item gives its burn time, which carries over to the next smelt; the fuel is
-- the carried item that burns longest (other than the input).
local function smelt(item)
	if not minetest.find_node_near(body.pos, REACH, {"default:furnace", "default:furnace_active"}, true) then
		return "no furnace near"
	end
	for _, recipe in ipairs(minetest.get_all_craft_recipes(item) or {}) do
		if recipe.method == "cooking" then
			local grid = fill(recipe.items, 1)
			if grid then
				local input = grid[1]
				local out = minetest.get_craft_result({method = "cooking", width = 1, items = {input}})
				if not out.item:is_empty() and out.item:get_name() == item then
					local burn = body.burn
					local fuels = {}
					local have = counts()
					have[input] = have[input] - 1
					while burn < out.time do
						local best, best_time = nil, 0
						for name, count in pairs(have) do
							local t = count > 0 and burn_time(name) or 0
							if t > best_time or (t == best_time and t > 0 and name < best) then
								best, best_time = name, t
							end
						end
						if not best then
							return "no fuel"
						end
						have[best] = have[best] - 1
						fuels[#fuels + 1] = best
						burn = burn + best_time
					end
					inv:remove_item("main", input)
					for _, name in ipairs(fuels) do
						inv:remove_item("main", name)
					end
					if not inv:room_for_item("main", out.item) then
						inv:add_item("main", input)
						for _, name in ipairs(fuels) do
							inv:add_item("main", name)
						end
						return "inventory full"
					end
					body.burn = burn - out.time
					inv:add_item("main", out.item)
					return "smelted " .. out.item:to_string()
				end
			end
		end
	end
	return "no recipe fits"
end

-- Vitals --------------------------------------------------------------------------------

-- One step's breath and damage from the nodes the body is in, as the engine applies them
-- to players: drowning where the head is in a node with `drowning`, and each node's
-- damage_per_second (lava), counting one step as one second.
local function vitals()
	local feet = ndef(node_name(body.pos)) or {}
	local head = ndef(node_name(offset(body.pos, 0, 1, 0))) or {}
	if (head.drowning or 0) > 0 then
		body.breath = math.max(0, body.breath - 1)
		if body.breath == 0 then
			body.hp = body.hp - head.drowning
		end
	else
		body.breath = math.min(BREATH_MAX, body.breath + 1)
	end
	local hurt = math.max(feet.damage_per_second or 0, head.damage_per_second or 0)
	body.hp = math.max(0, body.hp - hurt)
end

-- The world around the body --------------------------------------------------------------

local function window(p)
	local v = body.view
	return offset(p, -v.r, -v.below, -v.r), offset(p, v.r, v.above, v.r)
end

-- Mapgen makes whole mapchunks (80 nodes a side, aligned at -32): every chunk we asked
-- for is kept in `generated`, by its chunk coordinates.
local CHUNK = 16 * (tonumber(minetest.settings:get("chunksize")) or 5)
local CHUNK_ORIGIN = -16 * math.floor((tonumber(minetest.settings:get("chunksize")) or 5) / 2)

local function chunk_range(p1, p2, each)
	local lo, hi = {}, {}
	for _, axis in ipairs({"x", "y", "z"}) do
		lo[axis] = math.floor((p1[axis] - CHUNK_ORIGIN) / CHUNK)
		hi[axis] = math.floor((p2[axis] - CHUNK_ORIGIN) / CHUNK)
	end
	for x = lo.x, hi.x do
		for y = lo.y, hi.y do
			for z = lo.z, hi.z do
				if each(x, y, z) == false then
					return false
				end
			end
		end
	end
	return true
end

local function margin_box(p)
	local p1, p2 = window(p)
	return offset(p1, -MARGIN, -MARGIN, -MARGIN), offset(p2, MARGIN, MARGIN, MARGIN)
end

local function generated_around(p)
	local p1, p2 = margin_box(p)
	return chunk_range(p1, p2, function(x, y, z)
		return generated[x .. "," .. y .. "," .. z] == true
	end)
end

-- Generate the blocks around `p`, then call `after`. The reply waits meanwhile: the
-- globalstep stops reading requests until the emerge thread has finished.
local function emerge_around(p, after)
	local p1, p2 = margin_box(p)
	chunk_range(p1, p2, function(x, y, z)
		generated[x .. "," .. y .. "," .. z] = true
	end)
	pending = true
	minetest.emerge_area(p1, p2, function(_, _, remaining)
		if remaining == 0 then
			pending = false
			after()
		end
	end)
end

-- Forget every chunk generated so far, so that the next episode generates them again in
-- its own order, as a fresh server would (mapgen writes into neighbouring chunks, so the
-- order can matter at their borders).
local function forget_generated()
	for key in pairs(generated) do
		local x, y, z = key:match("(-?%d+),(-?%d+),(-?%d+)")
		local p1 = {x = CHUNK_ORIGIN + x * CHUNK, y = CHUNK_ORIGIN + y * CHUNK, z = CHUNK_ORIGIN + z * CHUNK}
		minetest.delete_area(p1, offset(p1, CHUNK - 1, CHUNK - 1, CHUNK - 1))
	end
	generated = {}
end

-- The voxel window as 2 bytes (big-endian content id) per node, ordered by height
-- (lowest first), then rows from north to south, then columns from west to east.
local function voxels()
	local p1, p2 = window(body.pos)
	local vm = minetest.get_voxel_manip(p1, p2)
	local e1, e2 = vm:get_emerged_area()
	vm:get_data(buffer)
	local area = VoxelArea:new({MinEdge = e1, MaxEdge = e2})
	local out, k = {}, 0
	local char, floor = string.char, math.floor
	for y = p1.y, p2.y do
		for z = p2.z, p1.z, -1 do
			local i = area:index(p1.x, y, z)
			for _ = p1.x, p2.x do
				local c = buffer[i]
				k = k + 1
				out[k] = char(floor(c / 256), c % 256)
				i = i + 1
			end
		end
	end
	return table.concat(out)
end

local function send(header, payload)
	payload = payload or ""
	header.nbytes = #payload
	local line = minetest.write_json(header) .. "\n"
	local ok, err = conn:send(line .. payload)
	if not ok then
		minetest.log("error", "rlgpt_agent: send failed: " .. tostring(err))
	end
end

local function observation(result)
	local inventory = {}
	for name, count in pairs(counts()) do
		inventory[#inventory + 1] = {name, count}
	end
	table.sort(inventory, function(a, b) return a[1] < b[1] end)
	send({
		ok = true,
		result = result,
		pos = {body.pos.x, body.pos.y, body.pos.z},
		dir = body.dir,
		hp = body.hp,
		breath = body.breath,
		time = minetest.get_timeofday(),
		steps = body.steps,
		inventory = inventory,
	}, voxels())
end

-- After an action: generate what the body may now see, let it land, take the step's
-- vitals, then reply.
local function finish(result, tick)
	local function go()
		if not generated_around(body.pos) then
			return emerge_around(body.pos, go)
		end
		local below = offset(body.pos, 0, -MARGIN, 0)
		if settle() and not generated_around(below) then
			return emerge_around(below, go)
		end
		if tick then
			vitals()
			minetest.set_timeofday((START_TIME + body.steps / DAY_STEPS) % 1)
		end
		observation(result)
	end
	go()
end

-- Trees --------------------------------------------------------------------------------

-- Mapgen v6 places its trees with the engine's global random generator, seeded from the
-- clock, so the same seed grows different forests. Its trees are switched off
-- (mgv6_spflags = notrees) and grown here instead, from a generator seeded by the
-- chunk's blockseed, with v6's tree density (its mgv6_np_trees noise: none below -0.39,
-- up to 4 trees in each 10 × 10 part of a chunk). Every tree stays inside its own chunk,
-- so no tree depends on the order in which chunks were made.
local NP_TREES = minetest.get_mapgen_setting_noiseparams("mgv6_np_trees")
local WATER_LEVEL = tonumber(minetest.get_mapgen_setting("water_level")) or 1
local PART = 10
local CROWN = 2 -- leaves reach this far from the trunk
local TALLEST = 8 -- trunk and crown together
local perlin = nil
local SOIL, KIND = {}, {}

minetest.register_on_mods_loaded(function()
	local c = minetest.get_content_id
	SOIL[c("default:dirt")] = "normal"
	SOIL[c("default:dirt_with_grass")] = "normal"
	SOIL[c("default:dirt_with_snow")] = "pine"
	KIND.normal = {trunk = c("default:tree"), leaves = c("default:leaves")}
	KIND.pine = {trunk = c("default:pine_tree"), leaves = c("default:pine_needles")}
	KIND.air = c("air")
end)

-- Air and plants (flowers, grass) may be overgrown by a tree.
local function open(cid)
	if cid == KIND.air then
		return true
	end
	local def = ndef(minetest.get_name_from_content_id(cid))
	return def ~= nil and def.buildable_to == true and (def.liquidtype or "none") == "none"
end

local function grow_tree(data, area, x, y, z, kind, rng)
	local height = 4 + rng:next(0, 1)
	for dy = height - 2, height + 1 do
		local reach = dy > height and 1 or CROWN
		for dz = -reach, reach do
			for dx = -reach, reach do
				local corner = math.abs(dx) == reach and math.abs(dz) == reach
				if not corner or rng:next(0, 1) == 0 then
					local i = area:index(x + dx, y + dy, z + dz)
					if open(data[i]) then
						data[i] = kind.leaves
					end
				end
			end
		end
	end
	for dy = 0, height - 1 do
		local i = area:index(x, y + dy, z)
		if open(data[i]) or data[i] == kind.leaves then
			data[i] = kind.trunk
		end
	end
end

minetest.register_on_generated(function(minp, maxp, blockseed)
	if maxp.y < WATER_LEVEL or not NP_TREES then
		return
	end
	perlin = perlin or minetest.get_perlin(NP_TREES)
	local rng = PcgRandom(blockseed)
	local vm, emin, emax = minetest.get_mapgen_object("voxelmanip")
	local area = VoxelArea:new({MinEdge = emin, MaxEdge = emax})
	local data = vm:get_data()
	local grown = false
	for z0 = minp.z, maxp.z - PART + 1, PART do
		for x0 = minp.x, maxp.x - PART + 1, PART do
			local noise = perlin:get_2d({x = x0 + PART / 2, y = z0 + PART / 2})
			local amount = noise < -0.39 and 0 or 0.04 * (noise + 0.39) / 1.39
			for _ = 1, math.floor(PART * PART * amount) do
				local x = rng:next(x0, x0 + PART - 1)
				local z = rng:next(z0, z0 + PART - 1)
				local inside = x - CROWN >= minp.x and x + CROWN <= maxp.x
					and z - CROWN >= minp.z and z + CROWN <= maxp.z
				if inside then
					local y = maxp.y - TALLEST
					while y > minp.y and open(data[area:index(x, y, z)]) do
						y = y - 1
					end
					local kind = KIND[SOIL[data[area:index(x, y, z)]]]
					if kind and y >= WATER_LEVEL and y > minp.y then
						grow_tree(data, area, x, y + 1, z, kind, rng)
						grown = true
					end
				end
			end
		end
	end
	if grown then
		vm:set_data(data)
		vm:calc_lighting()
		vm:write_to_map()
	end
end)

-- Requests ------------------------------------------------------------------------------

-- Where the body starts: the first point with a dry spawn level along a square spiral
-- around the origin, in mapgen's own terms (get_spawn_level), 16 nodes apart.
local function spawn_point()
	local x, z, dx, dz, run = 0, 0, 1, 0, 1
	for _ = 1, 64 do
		for _ = 1, 2 do
			for _ = 1, run do
				local y = minetest.get_spawn_level(x * 16, z * 16)
				if y then
					return {x = x * 16, y = y, z = z * 16}
				end
				x, z = x + dx, z + dz
			end
			dx, dz = -dz, dx
		end
		run = run + 1
	end
	return {x = 0, y = 10, z = 0}
end

local function reset(req)
	forget_generated()
	inv:set_list("main", {})
	inv:set_size("main", INV_SIZE)
	-- A start state for measuring one step of a chain alone: what the owner asks the body
	-- to carry at the start. Only a reset carries it, never an action: a policy cannot give.
	for _, entry in ipairs(req.inventory or {}) do
		if minetest.registered_items[entry[1]] then
			inv:add_item("main", ItemStack(entry[1] .. " " .. math.floor(entry[2])))
		end
	end
	local start = spawn_point()
	body = {
		pos = start,
		dir = 0,
		hp = HP_MAX,
		breath = BREATH_MAX,
		fall = 0,
		burn = 0,
		steps = 0,
		seed = req.seed or 0,
		view = {r = req.radius, below = req.below, above = req.above},
	}
	minetest.set_timeofday(START_TIME)
	emerge_around(start, function()
		-- get_spawn_level lies a little above the terrain: drop onto it.
		finish("reset", false)
	end)
end

local ACTIONS = {
	noop = function() return "noop" end,
	forward = function() return move(1) end,
	back = function() return move(-1) end,
	turn_left = function() body.dir = (body.dir + 3) % 4; return "turned" end,
	turn_right = function() body.dir = (body.dir + 1) % 4; return "turned" end,
	jump = jump,
	dig = function() return dig(front(0)) end,
	dig_high = function() return dig(front(1)) end,
	dig_low = function() return dig(front(-1)) end,
	dig_up = function() return dig(offset(body.pos, 0, 2, 0)) end,
	dig_down = function() return dig(offset(body.pos, 0, -1, 0)) end,
}
local VERBS = {place = place, craft = craft, smelt = smelt}

local function step(req)
	if body == nil then
		return send({ok = false, error = "step before reset"})
	end
	local result
	if req.verb then
		local verb = VERBS[req.verb]
		if not verb or not minetest.registered_items[req.item or ""] then
			return send({ok = false, error = "unknown action " .. tostring(req.verb) .. " " .. tostring(req.item)})
		end
		result = verb(req.item)
	else
		local action = ACTIONS[req.action or ""]
		if not action then
			return send({ok = false, error = "unknown action " .. tostring(req.action)})
		end
		result = action()
	end
	body.steps = body.steps + 1
	finish(result, true)
end

-- The node names by content id, for the Python side to read voxel windows with, and
-- what the body's rules need to know of each: whether it is solid (walkable), a liquid,
-- whether it hurts the body in it (damage per second) or drowns a head in it, and which
-- tools dig it (indices into
-- `tools`, 1 being the hand), by the engine's get_dig_params.
local function hello(req)
	local tools = {""}
	for name in pairs(minetest.registered_tools) do
		tools[#tools + 1] = name
	end
	table.sort(tools)
	local caps = {}
	for i, tool in ipairs(tools) do
		caps[i] = ItemStack(tool):get_tool_capabilities()
	end
	local names = {}
	for name, def in pairs(minetest.registered_nodes) do
		local diggers = {}
		if def.diggable ~= false and not liquid(name) then
			for i = 1, #tools do
				if minetest.get_dig_params(def.groups or {}, caps[i]).diggable then
					diggers[#diggers + 1] = i - 1
				end
			end
		end
		names[#names + 1] = {
			minetest.get_content_id(name), name, walkable(name), liquid(name),
			(def.damage_per_second or 0) > 0, (def.drowning or 0) > 0, diggers,
		}
	end
	-- The game's recipes for the items asked about, and where its ores are scattered.
	local recipes = {}
	for _, item in ipairs(req.items or {}) do
		for _, recipe in ipairs(minetest.get_all_craft_recipes(item) or {}) do
			local items = {}
			local size = 0
			for i in pairs(recipe.items) do
				size = math.max(size, i)
			end
			for i = 1, size do
				items[i] = recipe.items[i] or ""
			end
			recipes[#recipes + 1] = {item, recipe.method, recipe.width, items, recipe.output}
		end
	end
	-- Each ore with the item it drops when dug (its node's own drop, else itself) and the
	-- nodes it is scattered in.
	local ores = {}
	for _, ore in pairs(minetest.registered_ores) do
		if type(ore.ore) == "string" then
			local d = ndef(ore.ore)
			local drop = d and type(d.drop) == "string" and d.drop ~= "" and d.drop or ore.ore
			local wherein = type(ore.wherein) == "table" and ore.wherein or {ore.wherein}
			ores[#ores + 1] = {ore.ore, ore.y_min or -31000, ore.y_max or 31000, ore.clust_scarcity or 0, drop, wherein}
		end
	end
	send({ok = true, nodes = names, tools = tools, recipes = recipes, ores = ores})
end

local function handle(line)
	local req = minetest.parse_json(line)
	if type(req) ~= "table" then
		return send({ok = false, error = "bad request"})
	end
	if req.op == "step" then
		return step(req)
	elseif req.op == "reset" then
		return reset(req)
	elseif req.op == "hello" then
		return hello(req)
	end
	send({ok = false, error = "unknown op " .. tostring(req.op)})
end

local function shutdown(why)
	minetest.log("action", "rlgpt_agent: shutting down: " .. why)
	if conn then
		conn:close()
	end
	conn = nil
	minetest.request_shutdown("", false, 0)
end

minetest.register_globalstep(function()
	if conn == nil then
		if PORT == nil then
			return shutdown("no rlgpt_agent.port setting")
		end
		local tcp = socket.tcp()
		tcp:settimeout(5)
		local ok, err = tcp:connect("127.0.0.1", PORT)
		if not ok then
			return shutdown("cannot connect to the owner: " .. tostring(err))
		end
		tcp:setoption("tcp-nodelay", true)
		conn = tcp
	end
	local deadline = socket.gettime() + BUDGET
	while conn and not pending do
		local left = deadline - socket.gettime()
		if left <= 0 then
			return
		end
		conn:settimeout(left)
		local line, err = conn:receive("*l")
		if line then
			handle(line)
		elseif err ~= "timeout" then
			return shutdown("the owner closed the socket")
		end
	end
end)
